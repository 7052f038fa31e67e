"""Jobs can be cancelled: the terminal state ``cancelled``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03

Shared only: ``dms.processing_jobs`` accepts the state ``cancelled`` (``ck_..._state_known``),
a cancelled job has its ``finished_at`` (``ck_..._finished_when_terminal``), and cancelled rows
join done and dead ones in ``ix_processing_jobs_finished``, which ``prune`` uses. The tenant part
is empty: tenant schemas still move to 0005, so every schema of the fleet reports one head.

Both directions rewrite two CHECK constraints and one index of the queue table under an
ACCESS EXCLUSIVE lock, scanning its rows once: prune the queue first on a large one, and expect
workers to wait for the length of the migration.

Downgrade restores 0004's constraints and index exactly, which only holds while no job is
cancelled: if some are, it refuses with :class:`~dms.errors.MigrationError`, naming how many
and a few ids, and the shared schema stays at 0005. Cancelled jobs are not turned into dead or
done ones, which would misreport them (a dead job may be requeued by mistake and run after
all): delete them first (``dms jobs prune --older-than 0s`` deletes every finished job but dead
ones), or keep 0005.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.errors import MigrationError
from dms.migrations import MigrationScope

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

#: Cancelled job ids named in the downgrade's refusal.
SHOWN_JOBS = 3

#: Frozen copies of the definitions at this revision and at the previous one.
STATES = {
    "0005": "'queued', 'running', 'done', 'dead', 'cancelled'",
    "0004": "'queued', 'running', 'done', 'dead'",
}
TERMINAL = {
    "0005": "'done', 'dead', 'cancelled'",
    "0004": "'done', 'dead'",
}


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        _define_states(scope.schema, "0005")


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        _require_no_cancelled_jobs(scope.schema)
        _define_states(scope.schema, "0004")


def _define_states(schema: str, revision_: str) -> None:
    """The constraints and index that name states, as they are at ``revision_``."""
    table = "processing_jobs"
    op.drop_constraint("ck_processing_jobs_state_known", table, schema=schema, type_="check")
    op.create_check_constraint(
        "ck_processing_jobs_state_known",
        table,
        sa.text(f"state IN ({STATES[revision_]})"),
        schema=schema,
    )
    op.drop_constraint(
        "ck_processing_jobs_finished_when_terminal", table, schema=schema, type_="check"
    )
    op.create_check_constraint(
        "ck_processing_jobs_finished_when_terminal",
        table,
        sa.text(f"(state IN ({TERMINAL[revision_]})) = (finished_at IS NOT NULL)"),
        schema=schema,
    )
    op.drop_index("ix_processing_jobs_finished", table, schema=schema)
    op.create_index(
        "ix_processing_jobs_finished",
        table,
        ["finished_at"],
        schema=schema,
        postgresql_where=sa.text(f"state IN ({TERMINAL[revision_]})"),
    )


def _require_no_cancelled_jobs(schema: str) -> None:
    jobs = sa.table("processing_jobs", sa.column("id", sa.Uuid), sa.column("state"), schema=schema)
    cancelled = jobs.c.state == "cancelled"
    bind = op.get_bind()
    count = bind.scalar(sa.select(sa.func.count()).where(cancelled)) or 0
    if count:
        examples = bind.scalars(
            sa.select(jobs.c.id).where(cancelled).order_by(jobs.c.id).limit(SHOWN_JOBS)
        ).all()
        raise MigrationError(
            f"cannot downgrade {schema}.processing_jobs below 0005: {count} job(s) are "
            f"cancelled (e.g. {', '.join(map(str, examples))}), a state 0004 does not know; "
            "delete them first (dms jobs prune --older-than 0s), or stay at 0005"
        )
