"""What every system's fairness run shares: the scenario, its tenants, the trickle, the outcome."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import URL

#: The tenant whose backlog arrives at once.
BULK = "bulk"
#: The ten tenants that each enqueue one job per second.
SMALL = tuple(f"small{n:02d}" for n in range(10))
#: How many bulk jobs one enqueue call carries.
ENQUEUE_BATCH = 1000


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """The sizes and costs of one run, the same for every system."""

    bulk: int
    concurrency: int
    handler_ms: float
    #: How long the small tenants trickle for the systems whose runs are bounded by time.
    window_s: float
    #: Whether pgqueuer's and procrastinate's tables are analyzed once the backlog is in (as
    #: autovacuum would be within a minute or so), rather than planned as an empty queue.
    analyze: bool = True
    #: Whether dms.jobs also runs with the bulk tenant limited to 3 running, a limit that
    #: binds (slow behind a large backlog of short jobs: see results/fairness.md).
    with_limit: bool = False
    #: dms.jobs also runs with every tenant limited to each of these many running jobs.
    every_tenant_limits: tuple[int, ...] = ()


@dataclass(kw_only=True)
class Outcome:
    """What one run of one system measured.

    ``waits_ms`` are the small tenants' enqueue-to-start waits of the jobs that started;
    ``unstarted_ms`` the waits so far of those that had not started when the run ended (each a
    lower bound of its wait). With no small tenants (the bulk alone) both are empty.
    """

    system: str
    configuration: str
    trickle: bool
    bulk_started: int
    bulk_seconds: float
    #: The bulk was drained (all of it started) within the run.
    drained: bool
    waits_ms: list[float] = field(default_factory=list)
    unstarted_ms: list[float] = field(default_factory=list)

    @property
    def drain_per_s(self) -> float:
        """Bulk jobs started per second over the run (or until the last bulk job started)."""
        return self.bulk_started / self.bulk_seconds if self.bulk_seconds > 0 else 0.0

    @property
    def small_jobs(self) -> int:
        """The small tenants' jobs enqueued during the run."""
        return len(self.waits_ms) + len(self.unstarted_ms)

    def wait_ms(self, share: float) -> tuple[float, bool]:
        """The ``share`` quantile of the small tenants' waits, and whether it is a lower bound.

        A job that never started counts with its wait so far, a lower bound of its wait: the
        quantile over those is a lower bound of the true one, exact unless some unstarted job's
        wait so far is no longer than it (that job might have ranked above it).
        """
        ranked = sorted([*self.waits_ms, *self.unstarted_ms])
        if not ranked:
            return 0.0, False
        value = ranked[min(len(ranked) - 1, int(share * len(ranked)))]
        return value, any(wait <= value for wait in self.unstarted_ms)


class Stamps:
    """Enqueue and start instants (``time.perf_counter``) by job key, from any thread."""

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.bulk_starts: list[float] = []
        self._lock = threading.Lock()

    def send(self, key: str) -> None:
        """Note that the job ``key`` is about to be enqueued."""
        with self._lock:
            self.sent[key] = time.perf_counter()

    def start(self, key: str | None) -> None:
        """Note a handler's first line: a small tenant's job ``key``, or a bulk job (None)."""
        now = time.perf_counter()
        with self._lock:
            if key is None:
                self.bulk_starts.append(now)
            else:
                self.started.setdefault(key, now)

    def outcome(
        self, system: str, configuration: str, *, began: float, ended: float, bulk: int
    ) -> Outcome:
        """The run's outcome, counting only what started between ``began`` and ``ended``."""
        with self._lock:
            bulk_starts = sorted(at for at in self.bulk_starts if at <= ended)
            waits, unstarted = [], []
            for key, sent in self.sent.items():
                started = self.started.get(key)
                if started is not None and started <= ended:
                    waits.append((started - sent) * 1000)
                else:
                    unstarted.append((ended - sent) * 1000)
        drained = len(bulk_starts) >= bulk
        return Outcome(
            system=system,
            configuration=configuration,
            trickle=bool(self.sent),
            bulk_started=len(bulk_starts),
            bulk_seconds=(bulk_starts[-1] if drained else ended) - began,
            drained=drained,
            waits_ms=waits,
            unstarted_ms=unstarted,
        )


def without_jit(url: URL) -> None:
    """Turn PostgreSQL's JIT off for the database of ``url`` (its connections opened hereafter).

    A competitor's statement whose estimated cost passes ``jit_above_cost`` is compiled on every
    execution: pgqueuer's dequeue with per-entrypoint limits over 200,000 jobs spent 2.4 s per
    call compiling (1 ms without). A per-database setting an operator makes in advance.
    """
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            name = conn.exec_driver_sql("SELECT current_database()").scalar_one()
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET jit = off')
    finally:
        engine.dispose()


def trickle(stop: threading.Event, enqueue: Callable[[str, str], None]) -> None:
    """Each small tenant enqueues one job per second, spread over the second, until ``stop``.

    ``enqueue(tenant, key)`` enqueues one job of ``tenant`` carrying ``key`` (unique).
    """
    next_at = time.perf_counter()
    sequence = 0
    while not stop.is_set():
        for tenant in SMALL:
            next_at += 1 / len(SMALL)
            time.sleep(max(0.0, next_at - time.perf_counter()))
            if stop.is_set():
                return
            enqueue(tenant, f"{tenant}:{sequence}")
        sequence += 1
