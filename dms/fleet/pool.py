"""Run one task per tenant, in this process or on worker processes, and stop cleanly.

Alembic's ``command`` API and its ``op`` proxy are process-global, so fleet operations run in
parallel with processes, never threads: :func:`run_each` starts ``jobs`` worker processes
(``spawn``: nothing of this process's connections is inherited), each with an engine of its
own on the same database and settings, and keeps exactly one tenant per worker in flight. With
``jobs=1`` the tasks run here, on the caller's engine.

Stopping. Each task is one tenant in one transaction, so stopping at any point leaves every
tenant as it was or as it was meant to be, never in between; what is left is to stop soon and
to know which tenants are which:

* Ctrl-C (``KeyboardInterrupt``, or SIGTERM turned into one by the entry point): no tenant is
  started any more; the statements that workers are running are cancelled
  (``pg_cancel_backend``; workers ignore SIGINT themselves, so a terminal's Ctrl-C reaches only
  this process); the tenants in flight end, committed or rolled back. A second Ctrl-C
  terminates the workers' server sessions and stops waiting.
* A lost database connection (server restart): the run stops after the tenants in flight,
  since the next ones would fail the same way.
* A worker process that dies: the run stops; its tenant was rolled back by the server.
* This process killed: each worker notices and exits; the server rolls back their tenants.

Worker sessions are named ``dms fleet <pid>`` (``application_name``), so they are easy to find
in ``pg_stat_activity``, and to cancel.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from dms.config import Settings, settings_of
from dms.db import create_engine
from dms.fleet.interrupts import stop_here
from dms.fleet.progress import NoProgress, Progress
from dms.fleet.report import Outcome, TenantReport

#: A task: given an engine, the operation's parameters and one item (a tenant), its report.
#: Must be a module-level function (worker processes receive it by reference).
Task = Callable[[Engine, Any, str], TenantReport]

#: Why a run stopped before the end (:attr:`PoolResult.stopped`).
INTERRUPTED = "interrupted"
LOST_CONNECTION = "lost the connection to the database"
WORKER_DIED = "a worker process died"

_log = logging.getLogger("dms.fleet")


@dataclass(frozen=True, kw_only=True)
class PoolResult:
    """What :func:`run_each` got done, and what it left."""

    reports: tuple[TenantReport, ...]
    """Tenants that ended, in the order they ended."""
    unsettled: tuple[str, ...] = ()
    """Tenants in flight when the run stopped, whose end is unknown here: read it back."""
    pending: tuple[str, ...] = ()
    """Tenants never started."""
    stopped: str | None = None
    """Why the run ended early (:data:`INTERRUPTED`, ...); ``None``: it ran to the end."""

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C (or SIGTERM) stopped the run."""
        return self.stopped == INTERRUPTED


def run_each(
    task: Task,
    parameters: Any,
    items: Sequence[str],
    *,
    engine: Engine,
    jobs: int,
    progress: Progress | None = None,
) -> PoolResult:
    """Run ``task(engine, parameters, item)`` for every item, on ``jobs`` processes.

    ``parameters`` must pickle. Returns rather than raises when the run is stopped (see the
    module's docstring): the caller knows how to read back the unsettled tenants.
    """
    progress = progress or NoProgress()
    if jobs <= 1 or len(items) <= 1:
        return _run_here(task, parameters, items, engine, progress)
    return _Dispatcher(task, parameters, items, engine, min(jobs, len(items)), progress).run()


def _run_here(
    task: Task, parameters: Any, items: Sequence[str], engine: Engine, progress: Progress
) -> PoolResult:
    reports: list[TenantReport] = []
    for index, item in enumerate(items):
        try:
            stop_here()  # between two tenants: a Ctrl-C that a weakref callback swallowed
        except KeyboardInterrupt:
            return PoolResult(
                reports=tuple(reports), pending=tuple(items[index:]), stopped=INTERRUPTED
            )
        try:
            report = task(engine, parameters, item)
        except KeyboardInterrupt:
            return PoolResult(
                reports=tuple(reports),
                unsettled=(item,),
                pending=tuple(items[index + 1 :]),
                stopped=INTERRUPTED,
            )
        reports.append(report)
        progress.advance(report)
        if report.lost_connection:
            return PoolResult(
                reports=tuple(reports), pending=tuple(items[index + 1 :]), stopped=LOST_CONNECTION
            )
    return PoolResult(reports=tuple(reports))


# --- worker processes ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _WorkerSetup:
    url: str
    settings: Settings
    application_name: str


@dataclass
class _WorkerState:
    """The engine of a worker process (one per process, made by :func:`_start_worker`)."""

    engine: Engine | None = None


_WORKER = _WorkerState()


def _start_worker(setup: _WorkerSetup) -> None:
    # Ctrl-C in a terminal reaches every process of the group: the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.engine = create_engine(
        setup.url,
        settings=setup.settings,
        connect_args={"application_name": setup.application_name},
    )
    atexit.register(_WORKER.engine.dispose)  # close the session cleanly when the pool ends
    threading.Thread(target=_exit_with_parent, name="dms-fleet-parent-watch", daemon=True).start()


def _exit_with_parent() -> None:
    """Exit when the parent process is gone (killed): nobody would collect our results."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        # The server rolls back whatever transaction this process had open.
        os._exit(1)


def _run_in_worker(task: Task, parameters: Any, item: str) -> TenantReport:
    assert _WORKER.engine is not None, "worker process not started"  # noqa: S101 -- invariant
    return task(_WORKER.engine, parameters, item)


@dataclass
class _Dispatcher:
    """Keeps one tenant per worker in flight, and handles the ways a run stops."""

    task: Task
    parameters: Any
    items: Sequence[str]
    engine: Engine
    jobs: int
    progress: Progress
    reports: list[TenantReport] = field(default_factory=list)
    in_flight: dict[Future[TenantReport], str] = field(default_factory=dict)
    stopped: str | None = None

    @property
    def application_name(self) -> str:
        return f"dms fleet {os.getpid()}"

    def run(self) -> PoolResult:
        setup = _WorkerSetup(
            url=self.engine.url.render_as_string(hide_password=False),
            settings=settings_of(self.engine),
            application_name=self.application_name,
        )
        pool = ProcessPoolExecutor(
            max_workers=self.jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(setup,),
        )
        queue = iter(self.items)
        unsettled: tuple[str, ...] = ()
        try:
            unsettled = self._drive(pool, queue)
        finally:
            pool.shutdown(wait=not unsettled, cancel_futures=True)
        pending = tuple(queue)
        # A Ctrl-C between taking a result and recording it loses the record: read it back.
        accounted = {r.tenant for r in self.reports} | set(unsettled) | set(pending)
        unsettled += tuple(item for item in self.items if item not in accounted)
        return PoolResult(
            reports=tuple(self.reports), unsettled=unsettled, pending=pending, stopped=self.stopped
        )

    def _drive(self, pool: ProcessPoolExecutor, queue: Iterator[str]) -> tuple[str, ...]:
        """Dispatch and collect until done or stopped; the tenants whose end is unknown."""
        try:
            self._fill(pool, queue)
            while self.in_flight:
                self._collect()
                stop_here()  # a Ctrl-C that a weakref callback swallowed stops the run too
                self._fill(pool, queue)
        except _WorkerDied:
            return tuple(self.in_flight.values())
        except KeyboardInterrupt:
            self.stopped = INTERRUPTED
            return self._settle_after_interrupt()
        return ()

    def _fill(self, pool: ProcessPoolExecutor, queue: Iterator[str]) -> None:
        while self.stopped is None and len(self.in_flight) < self.jobs:
            item = next(queue, None)
            if item is None:
                return
            self.in_flight[pool.submit(_run_in_worker, self.task, self.parameters, item)] = item

    def _collect(self) -> None:
        done, _ = wait(self.in_flight, return_when=FIRST_COMPLETED)
        for future in done:
            item = self.in_flight.pop(future)
            self._record(item, future)

    def _record(self, item: str, future: Future[TenantReport]) -> None:
        try:
            report = future.result()
        except BrokenProcessPool:
            self.stopped = WORKER_DIED
            self.in_flight[future] = item  # its end is unknown: read back by the caller
            raise _WorkerDied from None
        except Exception as exc:  # a bug in a task must not hide the other tenants' reports
            report = TenantReport(
                tenant=item,
                from_revision=None,
                to_revision=None,
                seconds=0.0,
                outcome=Outcome.FAILED,
                error=f"{type(exc).__name__}: {exc}".splitlines()[0],
            )
        self.reports.append(report)
        self.progress.advance(report)
        if report.lost_connection and self.stopped is None:
            self.stopped = LOST_CONNECTION

    def _settle_after_interrupt(self) -> tuple[str, ...]:
        """Cancel what workers run, let the tenants in flight end; a second Ctrl-C: don't wait."""
        _log.warning("interrupted: cancelling %d tenant(s) in flight", len(self.in_flight))
        _signal_sessions(self.engine, self.application_name, sa.func.pg_cancel_backend)
        try:
            while self.in_flight:
                self._collect()
        except KeyboardInterrupt:
            _signal_sessions(self.engine, self.application_name, sa.func.pg_terminate_backend)
            return tuple(self.in_flight.values())
        except _WorkerDied:
            return tuple(self.in_flight.values())
        return ()


class _WorkerDied(Exception):
    """A worker process ended without a result (killed): the pool is broken."""


def _signal_sessions(engine: Engine, application_name: str, signal_fn: Any) -> None:
    """Cancel (or terminate) the server sessions of this run's workers; best effort."""
    activity = sa.table("pg_stat_activity", sa.column("pid"), sa.column("application_name"))
    try:
        with engine.connect() as conn:
            conn.execute(
                sa.select(signal_fn(activity.c.pid)).where(
                    activity.c.application_name == application_name
                )
            )
    except DBAPIError:  # the server may be the reason we stop
        _log.warning("could not reach the database to cancel the workers' statements")
