"""Job queue: processing_jobs and the idempotency ledger.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Shared only: ``dms.processing_jobs`` (partial indexes keep finished rows out of the dequeue path;
autovacuum tuned for a hot table) and ``dms.job_idempotency_keys``. The tenant part is empty:
tenant schemas still move to 0002, so every schema of the fleet reports one head.
"""

from __future__ import annotations

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from dms.migrations import MigrationScope
from dms.schema.ddl import execute_ddl

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen copy of dms.jobs.tables.JOBS_AUTOVACUUM: a revision must not change when the code does.
AUTOVACUUM = {
    "autovacuum_vacuum_scale_factor": 0.01,
    "autovacuum_vacuum_threshold": 200,
    "autovacuum_analyze_scale_factor": 0.02,
}


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        _create_jobs(scope.schema)
        _create_ledger(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.drop_table("job_idempotency_keys", schema=scope.schema)
        op.drop_table("processing_jobs", schema=scope.schema)


def _timestamp(name: str, *, nullable: bool = False, now: bool = False) -> sa.Column[object]:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=sa.func.now() if now else None,
    )


def _tenant_fk(table: str, schema: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant"],
        [f"{schema}.tenants.slug"],
        name=f"fk_{table}_tenant_tenants",
        ondelete="CASCADE",
    )


def _create_jobs(schema: str) -> None:
    op.create_table(
        "processing_jobs",
        sa.Column("id", sa.Uuid, nullable=False, server_default=sa.func.gen_random_uuid()),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state", sa.Text, nullable=False, server_default="queued"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        _timestamp("run_at", now=True),
        sa.Column("locked_by", sa.Text),
        _timestamp("lease_expires_at", nullable=True),
        sa.Column("last_error", sa.Text),
        sa.Column("errors", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("backoff", JSONB),
        sa.Column("idempotency_key", sa.Text),
        _timestamp("created_at", now=True),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_processing_jobs"),
        _tenant_fk("processing_jobs", schema),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'dead')",
            name=op.f("ck_processing_jobs_state_known"),
        ),
        sa.CheckConstraint(
            "btrim(kind) <> '' AND length(kind) <= 200", name=op.f("ck_processing_jobs_kind_valid")
        ),
        sa.CheckConstraint(
            "attempts >= 0 AND max_attempts >= 1", name=op.f("ck_processing_jobs_attempts_valid")
        ),
        sa.CheckConstraint(
            "(state = 'running') = (lease_expires_at IS NOT NULL) "
            "AND (state <> 'running' OR locked_by IS NOT NULL)",
            name=op.f("ck_processing_jobs_lease_only_when_running"),
        ),
        sa.CheckConstraint(
            "(state IN ('done', 'dead')) = (finished_at IS NOT NULL)",
            name=op.f("ck_processing_jobs_finished_when_terminal"),
        ),
        sa.CheckConstraint(
            "jsonb_typeof(errors) = 'array'", name=op.f("ck_processing_jobs_errors_is_array")
        ),
        schema=schema,
    )
    # Not postgresql_with=: SQLAlchemy 2.0 (on Python 3.10) does not know that table option.
    execute_ddl(
        op.get_bind(),
        sql.SQL("ALTER TABLE {}.{} SET ({})").format(
            sql.Identifier(schema),
            sql.Identifier("processing_jobs"),
            sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.SQL(name), sql.Literal(value))
                for name, value in AUTOVACUUM.items()
            ),
        ),
    )
    op.create_index(
        "ix_processing_jobs_dequeue",
        "processing_jobs",
        ["priority", "run_at", "id"],
        schema=schema,
        postgresql_where=sa.text("state = 'queued'"),
    )
    op.create_index(
        "ix_processing_jobs_lease",
        "processing_jobs",
        ["lease_expires_at"],
        schema=schema,
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_index(
        "ix_processing_jobs_finished",
        "processing_jobs",
        ["finished_at"],
        schema=schema,
        postgresql_where=sa.text("state IN ('done', 'dead')"),
    )
    op.create_index("ix_processing_jobs_tenant", "processing_jobs", ["tenant"], schema=schema)


def _create_ledger(schema: str) -> None:
    op.create_table(
        "job_idempotency_keys",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.Text, nullable=False),
        sa.Column("job_id", sa.Uuid, nullable=False),
        _timestamp("created_at", now=True),
        _timestamp("expires_at"),
        sa.PrimaryKeyConstraint(
            "tenant", "kind", "idempotency_key", name="pk_job_idempotency_keys"
        ),
        _tenant_fk("job_idempotency_keys", schema),
        sa.CheckConstraint(
            "btrim(idempotency_key) <> '' AND length(idempotency_key) <= 200",
            name=op.f("ck_job_idempotency_keys_key_valid"),
        ),
        schema=schema,
    )
    op.create_index(
        "ix_job_idempotency_keys_expires_at",
        "job_idempotency_keys",
        ["expires_at"],
        schema=schema,
    )
