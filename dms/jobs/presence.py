"""Which workers run, and which job kinds they handle: ``dms.job_workers``.

A running :class:`~dms.jobs.Worker` announces itself (its name and kinds) when it starts and
every :data:`ANNOUNCE_SECONDS` while it runs, and withdraws when it stops. A worker killed
without a stop stops announcing: it counts as running for :data:`LIVE_WITHIN` after it was last
seen, and its row is deleted a day later. So a queued job whose kind no live worker handles can
be told from one that merely waits (:func:`unhandled_kinds`, shown by ``dms healthcheck`` and
the metrics): such a job is never sent to the dead letter; it waits for a worker that handles it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from dms.jobs import _statements as statements
from dms.jobs.executor import Executor, connection_of

#: Seconds between two announcements of a running worker.
ANNOUNCE_SECONDS = 10.0
#: How long after its last announcement a worker still counts as running.
LIVE_WITHIN = timedelta(seconds=60)
#: How long the row of a worker that never withdrew (it was killed) is kept.
FORGET_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class LiveWorker:
    """A worker that announced itself within :data:`LIVE_WITHIN`."""

    name: str
    kinds: tuple[str, ...]
    started_at: datetime
    seen_at: datetime


def announce(target: Executor, name: str, kinds: Collection[str]) -> None:
    """Record worker ``name`` as running now, handling ``kinds``; forget long-gone workers."""
    conn = connection_of(target)
    conn.execute(statements.announce_statement(), {"worker_name": name, "kinds": sorted(kinds)})
    conn.execute(statements.forget_stale_workers_statement(), {"stale_after": FORGET_AFTER})


def withdraw(target: Executor, name: str) -> None:
    """Delete worker ``name``'s row: it stopped."""
    connection_of(target).execute(statements.withdraw_statement(), {"worker_name": name})


def live_workers(target: Executor) -> list[LiveWorker]:
    """The workers seen within :data:`LIVE_WITHIN`, by name."""
    rows = connection_of(target).execute(
        statements.live_workers_statement(), {"within": LIVE_WITHIN}
    )
    return [LiveWorker(row.name, tuple(row.kinds), row.started_at, row.seen_at) for row in rows]


def unhandled_kinds(queued: Mapping[str, int], workers: Collection[LiveWorker]) -> dict[str, int]:
    """Of ``queued`` (jobs by kind), the kinds that none of ``workers`` handles."""
    handled = {kind for worker in workers for kind in worker.kinds}
    return {kind: count for kind, count in sorted(queued.items()) if kind not in handled and count}
