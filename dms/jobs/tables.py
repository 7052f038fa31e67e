"""Tables of the job queue, on the shared ``dms`` schema's ``MetaData``.

Both tables carry an explicit schema (``dms``, the MetaData's default), so a connection routed to
a tenant with ``schema_translate_map={None: ...}`` leaves them alone: the queue is one table for
the whole fleet, and a job names its tenant in a column.

Only runnable rows are in the claim path: ``ix_processing_jobs_claim`` holds ``queued`` rows
only, by tenant (a claim walks the tenants in it, :mod:`dms.jobs._statements`), and
``ix_processing_jobs_lease`` holds ``running`` rows only, so finished jobs, however many, never
slow a claim down; a tenant's running jobs, which its limits count, are a range of
``ix_processing_jobs_tenant_state``. The table is small and hot (every job is inserted, updated
two or three times and deleted by ``prune``), so autovacuum is told to visit it far more often
than the default 20 % of dead rows would.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.engine import Connection

from dms.schema.ddl import execute_ddl
from dms.schema.shared import metadata

#: Storage parameters of ``processing_jobs``: vacuum after 1 % of rows changed (plus a floor),
#: analyze after 2 %, so that dead tuples of a busy queue do not pile up in its indexes.
JOBS_AUTOVACUUM = {
    "autovacuum_vacuum_scale_factor": 0.01,
    "autovacuum_vacuum_threshold": 200,
    "autovacuum_analyze_scale_factor": 0.02,
}

#: States a job row can be in; the transitions are drawn in ``docs/jobs.md``.
JOB_STATES = ("queued", "running", "done", "dead", "cancelled")

_TIMESTAMP = sa.DateTime(timezone=True)

processing_jobs = sa.Table(
    "processing_jobs",
    metadata,
    sa.Column("id", sa.Uuid, primary_key=True, server_default=sa.func.gen_random_uuid()),
    sa.Column(
        "tenant",
        sa.Text,
        sa.ForeignKey("dms.tenants.slug", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    sa.Column("state", sa.Text, nullable=False, server_default="queued"),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("run_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
    sa.Column("locked_by", sa.Text),
    sa.Column("lease_expires_at", _TIMESTAMP),
    sa.Column("last_error", sa.Text),
    sa.Column("errors", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    sa.Column("backoff", JSONB),
    sa.Column("idempotency_key", sa.Text),
    sa.Column("created_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
    sa.Column("started_at", _TIMESTAMP),
    sa.Column("finished_at", _TIMESTAMP),
    sa.CheckConstraint(
        "state IN ('queued', 'running', 'done', 'dead', 'cancelled')", name="state_known"
    ),
    sa.CheckConstraint("btrim(kind) <> '' AND length(kind) <= 200", name="kind_valid"),
    sa.CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="attempts_valid"),
    sa.CheckConstraint(
        "(state = 'running') = (lease_expires_at IS NOT NULL) "
        "AND (state <> 'running' OR locked_by IS NOT NULL)",
        name="lease_only_when_running",
    ),
    sa.CheckConstraint(
        "(state IN ('done', 'dead', 'cancelled')) = (finished_at IS NOT NULL)",
        name="finished_when_terminal",
    ),
    sa.CheckConstraint("jsonb_typeof(errors) = 'array'", name="errors_is_array"),
    sa.Index(
        "ix_processing_jobs_claim",
        "tenant",
        "priority",
        "run_at",
        "id",
        postgresql_where=sa.text("state = 'queued'"),
    ),
    sa.Index(
        "ix_processing_jobs_lease",
        "lease_expires_at",
        postgresql_where=sa.text("state = 'running'"),
    ),
    sa.Index(
        "ix_processing_jobs_finished",
        "finished_at",
        postgresql_where=sa.text("state IN ('done', 'dead', 'cancelled')"),
    ),
    # A tenant's jobs in one state: the running ones its limits count (a claim does, under its
    # lock), and those of a dropped tenant (the foreign key's cascade reads the first column).
    sa.Index("ix_processing_jobs_tenant_state", "tenant", "state"),
)
"""One row per job; see :class:`dms.jobs.Job` for the meaning of each column."""


def _set_autovacuum(table: sa.Table, connection: Connection, **_: Any) -> None:
    # Storage parameters as DDL after CREATE TABLE: SQLAlchemy 2.0 (the one on Python 3.10)
    # has no table option for them. Names and numbers are the constants above, never input.
    settings = sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.SQL(name), sql.Literal(value))
        for name, value in JOBS_AUTOVACUUM.items()
    )
    # Literal DDL escapes schema_translate_map, so apply it here (create_all into a copy).
    schema_map = connection.get_execution_options().get("schema_translate_map") or {}
    schema = str(schema_map.get(table.schema, table.schema))
    execute_ddl(
        connection,
        sql.SQL("ALTER TABLE {}.{} SET ({})").format(
            sql.Identifier(schema), sql.Identifier(table.name), settings
        ),
    )


sa.event.listen(processing_jobs, "after_create", _set_autovacuum)

job_idempotency_keys = sa.Table(
    "job_idempotency_keys",
    metadata,
    sa.Column(
        "tenant",
        sa.Text,
        sa.ForeignKey("dms.tenants.slug", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("idempotency_key", sa.Text, primary_key=True),
    # No foreign key to the job: the ledger outlives pruned jobs on purpose.
    sa.Column("job_id", sa.Uuid, nullable=False),
    sa.Column("created_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
    sa.Column("expires_at", _TIMESTAMP, nullable=False),
    sa.CheckConstraint(
        "btrim(idempotency_key) <> '' AND length(idempotency_key) <= 200", name="key_valid"
    ),
    sa.Index("ix_job_idempotency_keys_expires_at", "expires_at"),
)
"""The idempotency ledger: ``(tenant, kind, key) -> job_id``, kept until ``expires_at``."""

job_schedules = sa.Table(
    "job_schedules",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("cron", sa.Text, nullable=False),
    sa.Column("timezone", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", JSONB, nullable=False),
    sa.Column(
        "tenant",
        sa.Text,
        sa.ForeignKey("dms.tenants.slug", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("catch_up", sa.Interval, nullable=False),
    # The first tick not yet enqueued: a tick pass takes the rows where it has come.
    sa.Column("next_run_at", _TIMESTAMP, nullable=False),
    sa.Column("last_tick_at", _TIMESTAMP),
    # The most recent tick skipped because it was older than catch_up when a worker came by.
    sa.Column("skipped_until", _TIMESTAMP),
    sa.Column("updated_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
    sa.CheckConstraint("btrim(name) <> '' AND length(name) <= 200", name="name_valid"),
    sa.CheckConstraint("btrim(kind) <> '' AND length(kind) <= 200", name="kind_valid"),
    sa.CheckConstraint("max_attempts >= 1", name="attempts_valid"),
    sa.CheckConstraint("catch_up >= interval '0'", name="catch_up_valid"),
    sa.Index("ix_job_schedules_next_run_at", "next_run_at"),
)
"""Periodic jobs (:mod:`dms.jobs.schedules`): a job enqueued at every tick of ``cron``."""

job_workers = sa.Table(
    "job_workers",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("kinds", ARRAY(sa.Text), nullable=False),
    sa.Column("started_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
    sa.Column("seen_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
)
"""Running workers and the kinds they handle (:mod:`dms.jobs.presence`)."""

job_limits = sa.Table(
    "job_limits",
    metadata,
    sa.Column(
        "tenant",
        sa.Text,
        sa.ForeignKey("dms.tenants.slug", ondelete="CASCADE"),
        primary_key=True,
    ),
    # '' for the tenant's jobs of every kind (a kind is never blank), else one kind's jobs.
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("max_running", sa.Integer),
    sa.Column("per_second", sa.Float),
    # The rate limit's token bucket: what was left at ``tokens_at``; claims refill it by
    # ``per_second`` a second up to one second's worth (at least one job) and spend it.
    sa.Column("tokens", sa.Float, nullable=False, server_default="0"),
    sa.Column("tokens_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
    sa.Column("updated_at", _TIMESTAMP, nullable=False, server_default=sa.func.now()),
    sa.CheckConstraint("length(kind) <= 200", name="kind_valid"),
    sa.CheckConstraint(
        "max_running IS NOT NULL OR per_second IS NOT NULL", name="limits_something"
    ),
    sa.CheckConstraint("max_running >= 0", name="max_running_valid"),
    sa.CheckConstraint("per_second > 0 AND per_second <= 1000000", name="per_second_valid"),
)
"""Per-tenant limits on the jobs running and started per second (:mod:`dms.jobs.limits`)."""
