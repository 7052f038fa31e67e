"""The queue's statements as the SQL they render to, checked in beside the Core that makes them.

Every statement :mod:`dms.jobs` sends is a Core expression of :mod:`dms.jobs._statements` (the
claim is a ``select().with_for_update(skip_locked=True)`` feeding an ``UPDATE ... RETURNING``:
the queue's contract). What PostgreSQL receives is in ``dms/jobs/sql/<name>.sql``, one file per
statement and variant (:data:`STATEMENTS`), as SQLAlchemy renders it for psycopg (parameters as
``%(name)s``), laid out for reading: a reviewer reads the claim there and pastes it into
``EXPLAIN`` after putting in values. ``tests/unit/test_queue_sql.py`` fails when a file is not
what its expression renders (whitespace aside); ``python -m dms.jobs.rendered`` writes them
again. Statements that take filters are rendered with none given (every filter adds one
``AND`` of its column to the ``WHERE``).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg

from dms.jobs import _statements as statements
from dms.jobs.model import JobState

#: Each statement by the name of its file: what makes it.
STATEMENTS: dict[str, Callable[[], sa.Executable]] = {
    "enqueue": lambda: statements.insert_statement(keyed=False),
    "enqueue_keyed": lambda: statements.insert_statement(keyed=True),
    "claimer_settings": statements.claimer_settings_statement,
    "queue_order": statements.queue_order_statement,
    "restore_order": statements.restore_order_statement,
    "lock_limits": lambda: statements.lock_limits_statement(False),
    "lock_limits_of_kinds": lambda: statements.lock_limits_statement(True),
    "claim": lambda: statements.claim_statement(False, False),
    "claim_limited": lambda: statements.claim_statement(False, True),
    "claim_of_kinds": lambda: statements.claim_statement(True, False),
    "claim_of_kinds_limited": lambda: statements.claim_statement(True, True),
    "reclaim": lambda: statements.reclaim_statement(False),
    "reclaim_of_kinds": lambda: statements.reclaim_statement(True),
    "release_unheld": statements.release_unheld_statement,
    "complete": lambda: statements.fenced_statement("complete"),
    "complete_many": statements.complete_many_statement,
    "heartbeat": lambda: statements.fenced_statement("heartbeat"),
    "release": lambda: statements.fenced_statement("release"),
    "fail": lambda: statements.fenced_statement("fail"),
    "cancel": statements.cancel_statement,
    "cancel_matching": lambda: statements.cancel_matching_statement(
        statements.unfinished_filter([JobState.QUEUED.value], None, None, None)
    ),
    "get": statements.get_statement,
    "list": lambda: statements.list_statement(None, None, None, 100),
    "requeue": statements.requeue_statement,
    "requeue_matching": lambda: statements.requeue_matching_statement(None, None, None),
    "dead_letter": lambda: statements.dead_letter_statement(None, None, None, 100),
    "state_counts": lambda: statements.state_counts_statement(None, None),
    "oldest_queued": lambda: statements.oldest_queued_statement(None, None),
    "expired_leases": statements.expired_leases_statement,
    "prune_jobs": lambda: statements.prune_jobs_statement(include_dead=False),
    "prune_jobs_and_dead": lambda: statements.prune_jobs_statement(include_dead=True),
    "prune_keys": statements.prune_keys_statement,
    "database_now": statements.database_now_statement,
    "register_schedule": statements.register_schedule_statement,
    "due_schedules": statements.due_schedules_statement,
    "advance_schedule": statements.advance_schedule_statement,
    "list_schedules": statements.list_schedules_statement,
    "remove_schedule": statements.remove_schedule_statement,
    "announce_worker": statements.announce_statement,
    "forget_stale_workers": statements.forget_stale_workers_statement,
    "withdraw_worker": statements.withdraw_statement,
    "live_workers": statements.live_workers_statement,
    "set_limit": statements.set_limit_statement,
    "remove_limit": statements.remove_limit_statement,
    "list_limits": lambda: statements.list_limits_statement(None),
}

#: Where the files are, in the package.
SQL_DIRECTORY = "sql"


def compiled(name: str) -> str:
    """Statement ``name`` as psycopg receives it."""
    statement = STATEMENTS[name]()
    assert isinstance(statement, sa.ClauseElement)  # noqa: S101 (every statement is Core)
    return str(statement.compile(dialect=_DIALECT))


#: The dialect the engines of dms use (``postgresql+psycopg``).
_DIALECT: sa.Dialect = psycopg.dialect()  # type: ignore[no-untyped-call]


def laid_out(text: str) -> str:
    """``text`` laid out for reading (indented by clause), if sqlparse is installed.

    The ``dev`` dependency group has it; whitespace is all it changes.
    """
    try:
        import sqlparse  # noqa: PLC0415 (needed only to write the files again)
    except ImportError:
        return text
    return str(sqlparse.format(text, reindent=True, indent_width=4, wrap_after=96))


def checked_in(name: str) -> str | None:
    """The checked-in SQL of statement ``name``; ``None`` if there is no file."""
    path = resources.files("dms.jobs") / SQL_DIRECTORY / f"{name}.sql"
    return path.read_text("utf-8") if path.is_file() else None


def same_statement(one: str, other: str) -> bool:
    """Whether two texts are the same statement, whatever their whitespace."""
    return "".join(one.split()) == "".join(other.split())


def write(directory: Path) -> list[Path]:
    """Write every statement's file into ``directory``; the paths written."""
    directory.mkdir(exist_ok=True)
    written = []
    for name in STATEMENTS:
        path = directory / f"{name}.sql"
        header = f"-- dms.jobs: {name}, rendered from its Core expression (dms/jobs/rendered.py)"
        path.write_text(f"{header}\n{laid_out(compiled(name))};\n", encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(__file__).resolve().parent / SQL_DIRECTORY):
        print(path)
