"""The :class:`Worker`: wires the parts of :mod:`dms.jobs.worker` and runs their lifecycle."""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from functools import partial
from types import FrameType
from typing import ClassVar, Generic, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from dms.domain.validation import check_flag
from dms.errors import ValidationError
from dms.jobs.backoff import Backoff
from dms.jobs.claims import LEASE_SECONDS
from dms.jobs.model import Job
from dms.jobs.presence import withdraw
from dms.jobs.schedules import Schedule, register_schedules, require_schedules
from dms.jobs.worker import _arguments as arguments
from dms.jobs.worker._book import Claim, ClaimBook
from dms.jobs.worker._claimer import Claimer
from dms.jobs.worker._completer import Completer
from dms.jobs.worker._renewer import Renewer
from dms.jobs.worker._runner import Handler, Runner
from dms.jobs.worker._settler import Settler
from dms.jobs.worker._supervisor import RUNNER, Part, Supervisor
from dms.jobs.worker._ticker import Ticker
from dms.jobs.worker._wakeup import Listener, Wakeup, listen_url
from dms.jobs.worker.stats import Tally, WorkerStats
from dms.jobs.worker.unit import JobUnitOfWork, TenantTransaction, UnitOfWorkFactory

log = logging.getLogger(__name__)

U = TypeVar("U", bound=JobUnitOfWork)

#: Seconds an idle claimer waits for a notification before it polls the queue anyway.
POLL_SECONDS = 2.0
#: Seconds that running jobs get to finish after a stop before they are released.
GRACE_SECONDS = 30.0
#: Most jobs claimed by one statement, and completed by one statement, by default.
BATCH_SIZE = 500
#: Most jobs a worker claims ahead of its runner threads, by default (see :mod:`._window`).
PREFETCH = 1000
#: Claimer threads, each with its own connection: while one claim waits for PostgreSQL, the
#: other's rows are decoded (bench/README.md).
CLAIMERS = 2


class Worker(Generic[U]):
    """``concurrency`` runner threads that claim jobs of ``kinds`` and run their handlers.

    ``kinds`` defaults to the kinds of ``handlers``; a subset of them narrows what the worker
    claims, and a kind without a handler is refused here (the worker would only send its jobs
    to the dead letter). A job whose kind no running worker handles waits, queued, for one.
    ``backoff`` sets retry policies per kind (a job's own policy still wins).
    ``unit_of_work``: makes the unit of work each handler runs in, ``unit_of_work(tenant=...)``
    (default: :meth:`default_unit_of_work`, a :class:`~dms.jobs.worker.TenantTransaction`
    here; ``dms.DocumentWorker`` runs handlers in the tenant ``UnitOfWork`` with its repositories).
    ``prefetch``: most jobs claimed ahead of the runners (default :data:`PREFETCH`). Within
    it, the worker claims ahead what its runners finish in a few claim round trips at their
    current pace, and at least one job per runner (:mod:`._window`): many short jobs get
    large claims, long jobs are not hoarded. ``batch_size``: most jobs per claim or
    completion statement. ``schedules``: periodic jobs (:class:`~dms.jobs.Schedule`) that
    :meth:`start` registers; every worker ticks every registered schedule, whoever registered
    it. Every argument is checked here, before any SQL (:class:`~dms.errors.ValidationError`;
    limits in :mod:`._arguments`).
    """

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, Handler[U]],
        *,
        concurrency: int = 1,
        kinds: Collection[str] | None = None,
        lease: timedelta = timedelta(seconds=LEASE_SECONDS),
        poll_seconds: float = POLL_SECONDS,
        grace_seconds: float = GRACE_SECONDS,
        backoff: Mapping[str, Backoff] | None = None,
        listen: bool = True,
        listen_url: str | URL | None = None,
        name: str | None = None,
        batch_size: int = BATCH_SIZE,
        prefetch: int = PREFETCH,
        unit_of_work: UnitOfWorkFactory[U] | None = None,
        schedules: Collection[Schedule] = (),
    ) -> None:
        """Check every argument and configure the worker; nothing runs before :meth:`start`."""
        if not isinstance(engine, Engine):
            raise ValidationError(f"engine must be a SQLAlchemy Engine, not {engine!r}")
        self._handlers = cast(dict[str, Handler[U]], arguments.handlers(handlers))
        self._concurrency = arguments.count(
            "concurrency", concurrency, minimum=1, maximum=arguments.MAX_CONCURRENCY
        )
        self._kinds = arguments.kinds(self._handlers if kinds is None else kinds)
        if not self._kinds:
            raise ValidationError("the worker has no kinds to work: give handlers or kinds")
        unhandled = sorted(set(self._kinds) - set(self._handlers))
        if unhandled:
            raise ValidationError(
                f"no handler for job kind(s) {', '.join(unhandled)} "
                f"(handlers: {', '.join(sorted(self._handlers)) or 'none'})"
            )
        self._lease = arguments.lease(lease)
        self._poll_seconds = arguments.seconds("poll_seconds", poll_seconds, positive=True)
        self._grace_seconds = arguments.seconds("grace_seconds", grace_seconds, positive=False)
        self._backoff = arguments.backoffs(backoff)
        self._batch_size = arguments.count(
            "batch_size", batch_size, minimum=1, maximum=arguments.MAX_BATCH_SIZE
        )
        self._prefetch = arguments.count(
            "prefetch", prefetch, minimum=0, maximum=arguments.MAX_PREFETCH
        )
        if unit_of_work is not None and not callable(unit_of_work):
            raise ValidationError(f"unit_of_work must be callable, not {unit_of_work!r}")
        if unit_of_work is None:  # what a given factory makes is known only when it runs
            arguments.handlers_fit(self._handlers, self.unit_type)
        self._listen_url = (
            listen_url_of(engine, listen_url) if check_flag("listen", listen) else None
        )
        self.name = arguments.name("name", name if name is not None else _default_name())
        self._schedules = require_schedules(schedules)
        self._engine = engine
        self._unit_of_work = unit_of_work or self.default_unit_of_work(engine)
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._runners_done = threading.Event()
        # Leases are renewed until the stop has released what the worker held: a handler in
        # its grace period keeps its lease.
        self._renewals_end = threading.Event()
        self._tally = Tally(self._concurrency)
        self._wakeup = Wakeup(self._stopping)
        self._book = ClaimBook(
            runners=self._concurrency,
            prefetch=self._prefetch,
            batch_size=self._batch_size,
            now=time.monotonic(),
            on_free=self._wakeup.wake_if_limited,
        )
        self._ready: queue.SimpleQueue[Claim] = queue.SimpleQueue()
        self._acks: queue.SimpleQueue[Claim] = queue.SimpleQueue()
        self._settler = Settler(
            engine, book=self._book, tally=self._tally, worker=self.name, backoff=self._backoff
        )
        self._supervisor = Supervisor(
            name=self.name,
            tally=self._tally,
            stopping=self._stopping,
            runner_lost=self._release_ready,
        )
        self._started = False

    #: What :meth:`default_unit_of_work` gives each handler: a handler annotated with another
    #: class is refused when the worker is made (:func:`._arguments.handlers_fit`).
    unit_type: ClassVar[type] = TenantTransaction

    @classmethod
    def default_unit_of_work(cls, engine: Engine) -> UnitOfWorkFactory[U]:
        """The factory used when none is given: :class:`TenantTransaction` here.

        ``dms.DocumentWorker`` (:mod:`dms.worker`) overrides it with the tenant ``UnitOfWork``.
        """
        return cast(UnitOfWorkFactory[U], TenantTransaction.factory(engine))

    # --- parts ----------------------------------------------------------------------------

    def _runner(self) -> Part:
        return Runner(
            name=self.name,
            ready=self._ready,
            acks=self._acks,
            book=self._book,
            settler=self._settler,
            tally=self._tally,
            handlers=self._handlers,
            unit_of_work=self._unit_of_work,
            stopping=self._stopping,
        )

    def _claimer(self) -> Part:
        return Claimer(
            self._engine,
            worker_id=self.name,
            kinds=self._kinds,
            lease=self._lease,
            ready=self._ready,
            book=self._book,
            tally=self._tally,
            wakeup=self._wakeup,
            stopping=self._stopping,
            poll_seconds=self._poll_seconds,
        )

    def _completer(self) -> Part:
        return Completer(
            self._engine,
            name=self.name,
            acks=self._acks,
            book=self._book,
            tally=self._tally,
            batch_size=self._batch_size,
            runners_done=self._runners_done,
        )

    def _renewer(self) -> Part:
        return Renewer(
            self._engine,
            name=self.name,
            book=self._book,
            tally=self._tally,
            lease=self._lease,
            stopping=self._renewals_end,
        )

    def _ticker(self) -> Part:
        return Ticker(
            self._engine,
            name=self.name,
            kinds=self._kinds,
            stopping=self._stopping,
            duties=self.on_tick,
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        """The job kinds this worker claims."""
        return self._kinds

    def on_tick(self, conn: Connection) -> None:
        """Run by the ticker about once a second, after the schedules' ticks; nothing here.

        A hook for a worker one layer up (:class:`dms.DocumentWorker` keeps the audit trail's
        sealing scheduled): ``conn`` is in a transaction of its own, committed when this
        returns; a database error rolls it back and waits for the next pass.
        """

    def _listener(self, url: str) -> Part:
        return Listener(
            url,
            name=self.name,
            wakeup=self._wakeup,
            stopping=self._stopping,
            poll_seconds=self._poll_seconds,
        )

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Register the schedules; start runners, claimers, completer, renewer, ticker, listener.

        A schedule that cannot be registered (its tenant is gone) raises here, and nothing runs.
        """
        if self._started:
            raise ValidationError("this worker was already started")
        if self._schedules:
            with self._engine.begin() as conn:
                register_schedules(conn, self._schedules)
        self._started = True
        for _ in range(self._concurrency):
            self._supervisor.start(RUNNER, self._runner)
        self._supervisor.start("completer", self._completer)
        for _ in range(CLAIMERS):
            self._supervisor.start("claimer", self._claimer)
        self._supervisor.start("renewer", self._renewer)
        self._supervisor.start("ticker", self._ticker)
        if self._listen_url is not None:
            self._supervisor.start("listener", partial(self._listener, self._listen_url))

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop claiming; give running jobs ``grace_seconds`` to finish; release the rest.

        A released job goes back to ``queued`` without an attempt penalty; if its handler
        finishes later anyway, its completion raises ``LeaseLost`` and its writes roll back.
        """
        grace = self._grace_seconds if grace_seconds is None else grace_seconds
        self._stopping.set()
        self._stop_requested.set()
        self._wakeup.wake()
        self._book.wake_all()
        deadline = time.monotonic() + grace
        # A claim under way when the stop came is handed out before the claimers end: it is
        # then held, and released below with the rest.
        self._supervisor.join("claimer", timeout=self._poll_seconds + 1.0)
        self._release_ready()
        self._supervisor.join(RUNNER, timeout=max(0.0, deadline - time.monotonic()))
        # Finished jobs waiting for their batched completion are completed before the rest
        # (jobs still running past the grace period) is released.
        self._runners_done.set()
        self._supervisor.join("completer", timeout=max(1.0, deadline - time.monotonic()))
        for claim in self._book.take_all():
            self._settler.release(claim)
        self._renewals_end.set()
        self._supervisor.join("renewer", "ticker", "listener", timeout=self._poll_seconds + 1.0)
        self._withdraw()

    def _withdraw(self) -> None:
        """No longer count as a running worker of its kinds (a killed one ages out instead)."""
        try:
            with self._engine.begin() as conn:
                withdraw(conn, self.name)
        except sa.exc.DBAPIError as exc:
            log.warning("worker %s: withdrawing its presence failed (%s)", self.name, exc.orig)

    def _release_ready(self) -> None:
        """Release the jobs claimed ahead that no runner has taken: no one will run them here.

        At a stop, and when a failed runner cannot be replaced and none is left.
        """
        if self._tally.snapshot(held=0).runners_alive > 0 and not self._stopping.is_set():
            return
        while True:
            try:
                claim = self._ready.get_nowait()
            except queue.Empty:
                return
            self._settler.release(claim)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every thread of the worker to end (after :meth:`stop`); True if all did.

        A handler that overran the grace period keeps its thread alive until it returns.
        """
        return self._supervisor.join(timeout=timeout)

    def run_until_stopped(self) -> None:
        """Start, block until SIGTERM, SIGINT or :meth:`stop`, then stop gracefully.

        Signal handlers are installed only when called from the main thread, and restored after.
        """
        restore = self._install_signal_handlers()
        self.start()
        try:
            # A timeout keeps the main thread responsive to signals on every platform.
            while not self._stop_requested.wait(timeout=0.5):
                pass
        finally:
            self.stop()
            restore()

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def request_stop(signum: int, frame: FrameType | None) -> None:
            log.info("worker %s: signal %d, stopping", self.name, signum)
            self._stop_requested.set()

        previous = {
            sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)
        }

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def __enter__(self) -> Worker[U]:
        """Start the worker."""
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Stop the worker gracefully."""
        self.stop()

    # --- inspection -----------------------------------------------------------------------

    @property
    def running_jobs(self) -> tuple[Job, ...]:
        """The jobs this worker is running right now."""
        return self._book.running_jobs()

    def stats(self) -> WorkerStats:
        """The worker's counters now: runners alive and replaced, parts restarted, outcomes."""
        return self._tally.snapshot(held=self._book.held())


def listen_url_of(engine: Engine, url: str | URL | None) -> str:
    """The libpq URL a worker LISTENs on: ``url``, or the engine's."""
    if url is not None and not isinstance(url, str | URL):
        raise ValidationError(f"listen_url must be a URL, not {url!r}")
    return listen_url(engine, url)


def _default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
