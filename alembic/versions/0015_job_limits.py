"""Per-tenant limits of the job queue: ``dms.job_limits``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

Shared only: a row limits one tenant's jobs (``kind`` ``''``: of every kind; else of one kind)
to ``max_running`` running at once and ``per_second`` started a second (a token bucket kept in
``tokens`` and ``tokens_at``). Claims read the rows under a per-tenant advisory lock
(:mod:`dms.jobs.limits`). The tenant part is empty: tenant schemas still move to 0015, so every
schema of the fleet reports one head. The downgrade drops the table and the limits in it.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        _create_limits(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.drop_table("job_limits", schema=scope.schema)


def _create_limits(schema: str) -> None:
    # A frozen copy of dms.jobs.tables.job_limits at this revision.
    op.create_table(
        "job_limits",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("max_running", sa.Integer),
        sa.Column("per_second", sa.Float),
        sa.Column("tokens", sa.Float, nullable=False, server_default="0"),
        sa.Column(
            "tokens_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("tenant", "kind", name="pk_job_limits"),
        sa.ForeignKeyConstraint(
            ["tenant"],
            [f"{schema}.tenants.slug"],
            name="fk_job_limits_tenant_tenants",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("length(kind) <= 200", name=op.f("ck_job_limits_kind_valid")),
        sa.CheckConstraint(
            "max_running IS NOT NULL OR per_second IS NOT NULL",
            name=op.f("ck_job_limits_limits_something"),
        ),
        sa.CheckConstraint("max_running >= 0", name=op.f("ck_job_limits_max_running_valid")),
        sa.CheckConstraint(
            "per_second > 0 AND per_second <= 1000000",
            name=op.f("ck_job_limits_per_second_valid"),
        ),
        schema=schema,
    )
