"""Claims shared between tenants: the queue's runnable rows indexed by tenant first.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05

Shared only: ``ix_processing_jobs_claim`` on ``processing_jobs (tenant, priority, run_at, id)``
for ``queued`` rows replaces ``ix_processing_jobs_dequeue`` (``priority, run_at, id``). A claim
walks the tenants that have runnable jobs in this index (one probe per tenant) and takes each
one's share in its own order (:func:`dms.jobs._statements.claim_statement`), so one tenant's
backlog no longer holds up every other tenant's jobs. One index replaces the other: enqueues
keep the cost of one index on runnable rows. ``CREATE INDEX`` blocks writes to the queue while
it runs (seconds for a queue of a few hundred thousand runnable jobs).
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

#: Frozen copies of the two indexes' columns.
CLAIM_COLUMNS = ["tenant", "priority", "run_at", "id"]
DEQUEUE_COLUMNS = ["priority", "run_at", "id"]
_QUEUED = sa.text("state = 'queued'")


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.create_index(
            "ix_processing_jobs_claim",
            "processing_jobs",
            CLAIM_COLUMNS,
            schema=scope.schema,
            postgresql_where=_QUEUED,
        )
        op.drop_index("ix_processing_jobs_dequeue", "processing_jobs", schema=scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.create_index(
            "ix_processing_jobs_dequeue",
            "processing_jobs",
            DEQUEUE_COLUMNS,
            schema=scope.schema,
            postgresql_where=_QUEUED,
        )
        op.drop_index("ix_processing_jobs_claim", "processing_jobs", schema=scope.schema)
