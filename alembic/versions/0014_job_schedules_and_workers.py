"""Periodic jobs and the workers' presence: ``dms.job_schedules`` and ``dms.job_workers``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

Shared only: a schedule names a cron expression (and its time zone) and the job to enqueue at
each tick (kind, payload, tenant, priority, attempts), how far back missed ticks are caught up,
and where it has come (``next_run_at``, the first tick not yet enqueued; ``last_tick_at``;
``skipped_until``). Workers enqueue due ticks under a row lock (:mod:`dms.jobs.schedules`).
``dms.job_workers``: one row per running worker (its name and the kinds it handles), written when
it starts and every few seconds while it runs, deleted when it stops: what tells a job that no
running worker handles (``dms healthcheck``, the metrics) from one that merely waits.
The tenant part is empty: tenant schemas still move to 0014, so every schema of the fleet
reports one head. The downgrade drops both tables and the schedules in them.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        _create_schedules(scope.schema)
        _create_workers(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.drop_table("job_workers", schema=scope.schema)
        op.drop_table("job_schedules", schema=scope.schema)


def _timestamp(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _create_schedules(schema: str) -> None:
    # A frozen copy of dms.jobs.tables.job_schedules at this revision.
    op.create_table(
        "job_schedules",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("cron", sa.Text, nullable=False),
        sa.Column("timezone", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("catch_up", sa.Interval, nullable=False),
        _timestamp("next_run_at", nullable=False),
        _timestamp("last_tick_at"),
        _timestamp("skipped_until"),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("name", name="pk_job_schedules"),
        sa.ForeignKeyConstraint(
            ["tenant"],
            [f"{schema}.tenants.slug"],
            name="fk_job_schedules_tenant_tenants",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "btrim(name) <> '' AND length(name) <= 200", name=op.f("ck_job_schedules_name_valid")
        ),
        sa.CheckConstraint(
            "btrim(kind) <> '' AND length(kind) <= 200", name=op.f("ck_job_schedules_kind_valid")
        ),
        sa.CheckConstraint("max_attempts >= 1", name=op.f("ck_job_schedules_attempts_valid")),
        sa.CheckConstraint(
            "catch_up >= interval '0'", name=op.f("ck_job_schedules_catch_up_valid")
        ),
        schema=schema,
    )
    op.create_index("ix_job_schedules_next_run_at", "job_schedules", ["next_run_at"], schema=schema)


def _create_workers(schema: str) -> None:
    # A frozen copy of dms.jobs.tables.job_workers at this revision.
    op.create_table(
        "job_workers",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("kinds", ARRAY(sa.Text), nullable=False),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column(
            "seen_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("name", name="pk_job_workers"),
        schema=schema,
    )
