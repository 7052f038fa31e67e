"""The job queue's tenant index holds the state too: ``ix_processing_jobs_tenant_state``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07

Shared only. A claim that holds a limited tenant's lock counts the tenant's ``running`` jobs
(:mod:`dms.jobs.limits`). Neither index served that count: ``ix_processing_jobs_tenant`` found
every job the tenant ever had, finished ones included, and ``ix_processing_jobs_lease`` every
running job of every tenant. Behind a backlog the planner joined both as bitmaps and read
57,000 index rows a claim, 12 ms of each limited claim (bench/results/fairness.md). Keyed by
``(tenant, state)`` the count is a range of the tenant's running rows. The index replaces the
tenant index rather than adding one: every update of a job changes ``state``, so it is written
on every change either way (a column of the partial indexes' predicates, the updates are never
HOT), and its first column still serves the foreign key's cascade when a tenant is dropped.
The tenant part is empty, as 0015's. The downgrade puts the tenant index back.
"""

from __future__ import annotations

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.drop_index("ix_processing_jobs_tenant", "processing_jobs", schema=scope.schema)
        op.create_index(
            "ix_processing_jobs_tenant_state",
            "processing_jobs",
            ["tenant", "state"],
            schema=scope.schema,
        )


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.drop_index("ix_processing_jobs_tenant_state", "processing_jobs", schema=scope.schema)
        op.create_index(
            "ix_processing_jobs_tenant", "processing_jobs", ["tenant"], schema=scope.schema
        )
