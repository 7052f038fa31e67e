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
from collections.abc import Callable, Mapping
from functools import partial
from types import FrameType
from typing import Any, ClassVar, Generic, TypeVar, cast, overload

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from dms.db import async_engine_like
from dms.errors import ValidationError
from dms.jobs.model import Job
from dms.jobs.presence import withdraw
from dms.jobs.schedules import register_schedules
from dms.jobs.worker import _arguments as arguments
from dms.jobs.worker._book import Claim, ClaimBook
from dms.jobs.worker._claimer import Claimer
from dms.jobs.worker._completer import Completer
from dms.jobs.worker._loop import LoopRunner
from dms.jobs.worker._ready import ReadyQueues
from dms.jobs.worker._renewer import Renewer
from dms.jobs.worker._runner import AsyncHandler, Handler, Runner, RunnerParts
from dms.jobs.worker._settler import Settler
from dms.jobs.worker._supervisor import RUNNER, Part, Supervisor
from dms.jobs.worker._ticker import Ticker
from dms.jobs.worker._wakeup import Listener, Wakeup, listen_url
from dms.jobs.worker.config import WorkerConfig
from dms.jobs.worker.stats import Tally, WorkerStats
from dms.jobs.worker.unit import (
    AsyncJobUnitOfWork,
    AsyncTenantTransaction,
    AsyncUnitOfWorkFactory,
    JobUnitOfWork,
    TenantTransaction,
    UnitOfWorkFactory,
)

log = logging.getLogger(__name__)

U = TypeVar("U", bound=JobUnitOfWork)
A = TypeVar("A", bound=AsyncJobUnitOfWork)

#: Seconds that cancelled async handlers get to roll back, at a stop past the grace period.
CANCEL_SECONDS = 5.0
#: Claimer threads, each with its own connection: while one claim waits for PostgreSQL, the
#: other's rows are decoded (bench/README.md).
CLAIMERS = 2


class Worker(Generic[U]):
    """Runner threads that claim jobs and run their ``handlers``, configured by ``config``.

    ``handlers`` map job kinds to ``handler(unit, job)``: plain functions run on ``concurrency``
    runner threads, ``async def`` ones on one event loop, ``concurrency`` at once, each in an
    async unit of work (docs/async.md). ``config`` says how the worker runs
    (:class:`~dms.jobs.WorkerConfig`: threads, kinds, lease, polling, batches, schedules;
    default: ``WorkerConfig()``). The config's ``kinds`` default to the kinds of ``handlers``;
    a kind without a handler is refused here (the worker would only send its jobs to the dead
    letter). A job whose kind no running worker handles waits, queued, for one.
    ``unit_of_work``: makes the unit of work each handler runs in, ``unit_of_work(tenant=...)``
    (default: :meth:`default_unit_of_work`, a :class:`~dms.jobs.worker.TenantTransaction`
    here; ``dms.DocumentWorker`` runs handlers in the tenant ``UnitOfWork`` with its
    repositories). Everything is checked here, before any SQL
    (:class:`~dms.errors.ValidationError`).
    """

    @overload
    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, Handler[U]],
        config: WorkerConfig | None = None,
        *,
        unit_of_work: UnitOfWorkFactory[U] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Worker[Any],
        engine: Engine,
        handlers: Mapping[str, AsyncHandler[A]],
        config: WorkerConfig | None = None,
        *,
        unit_of_work: AsyncUnitOfWorkFactory[A] | None = None,
    ) -> None: ...

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, Handler[U]] | Mapping[str, AsyncHandler[Any]],
        config: WorkerConfig | None = None,
        *,
        unit_of_work: UnitOfWorkFactory[U] | AsyncUnitOfWorkFactory[Any] | None = None,
    ) -> None:
        """Check the arguments and configure the worker; nothing runs before :meth:`start`."""
        if not isinstance(engine, Engine):
            raise ValidationError(f"engine must be a SQLAlchemy Engine, not {engine!r}")
        if config is None:
            config = WorkerConfig()
        elif not isinstance(config, WorkerConfig):
            raise ValidationError(f"config must be a WorkerConfig, not {config!r}")
        self.config = config
        self._handlers = cast(dict[str, Handler[U]], arguments.handlers(handlers))
        self._kinds = arguments.kinds(self._handlers if config.kinds is None else config.kinds)
        self._check_kinds()
        self._listen_url = listen_url(engine, config.listen_url) if config.listen else None
        self.name = config.name if config.name is not None else _default_name()
        self._engine = engine
        self._looped_kinds = arguments.async_kinds(self._handlers_of(frozenset(self._kinds)))
        self._threaded_kinds = frozenset(self._kinds) - self._looped_kinds
        self._units(unit_of_work)
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._runners_done = threading.Event()
        # Leases are renewed until the stop has released what the worker held: a handler in
        # its grace period keeps its lease.
        self._renewals_end = threading.Event()
        # Runner threads for plain handlers, one event loop for async ones: each runs
        # ``concurrency`` jobs at once.
        self._tally = Tally(
            (config.concurrency if self._threaded_kinds else 0) + bool(self._looped_kinds)
        )
        self._wakeup = Wakeup(self._stopping)
        self._book = ClaimBook(
            runners=config.concurrency * (bool(self._threaded_kinds) + bool(self._looped_kinds)),
            prefetch=config.prefetch,
            batch_size=config.batch_size,
            now=time.monotonic(),
            on_free=self._wakeup.wake_if_limited,
        )
        self._ready = ReadyQueues(self._looped_kinds)
        self._acks: queue.SimpleQueue[Claim] = queue.SimpleQueue()
        self._settler = Settler(
            engine,
            book=self._book,
            tally=self._tally,
            worker=self.name,
            backoff=dict(config.backoff or {}),
        )
        self._supervisor = Supervisor(
            name=self.name,
            tally=self._tally,
            stopping=self._stopping,
            runner_lost=self._release_ready,
        )
        self._parts = RunnerParts(
            name=self.name,
            acks=self._acks,
            book=self._book,
            settler=self._settler,
            tally=self._tally,
            stopping=self._stopping,
        )
        self._started = False

    def _units(self, unit_of_work: object) -> None:
        """The unit-of-work factories: the one given (for one kind of handler), or the class's.

        A handler annotated with a unit that its factory does not make is refused here.
        """
        if unit_of_work is not None and not callable(unit_of_work):
            raise ValidationError(f"unit_of_work must be callable, not {unit_of_work!r}")
        if unit_of_work is not None and self._looped_kinds and self._threaded_kinds:
            raise ValidationError(
                "unit_of_work makes the units of one kind of handler, and these handlers mix "
                f"async def ({', '.join(sorted(self._looped_kinds))}) and plain functions "
                f"({', '.join(sorted(self._threaded_kinds))}): run a worker for each"
            )
        if unit_of_work is None:  # what a given factory makes is known only when it runs
            arguments.handlers_fit(self._handlers_of(self._threaded_kinds), self.unit_type)
            arguments.handlers_fit(self._handlers_of(self._looped_kinds), self.async_unit_type)
        self._loops: list[LoopRunner] = []
        self._async_engine: AsyncEngine | None = None
        if self._looped_kinds:
            # One connection per job in flight at most, as a runner thread holds one.
            self._async_engine = async_engine_like(
                self._engine,
                pool_size=self.config.concurrency,
                max_overflow=0,
                pool_pre_ping=True,
            )
            self._async_unit_of_work = cast(
                AsyncUnitOfWorkFactory[AsyncJobUnitOfWork],
                unit_of_work or self.default_async_unit_of_work,
            )
        if self._threaded_kinds:
            self._unit_of_work = cast(
                UnitOfWorkFactory[U], unit_of_work or self.default_unit_of_work(self._engine)
            )

    def _handlers_of(self, kinds: frozenset[str]) -> dict[str, Handler[U]]:
        return {kind: self._handlers[kind] for kind in kinds}

    def _check_kinds(self) -> None:
        if not self._kinds:
            raise ValidationError("the worker has no kinds to work: give handlers or kinds")
        unhandled = sorted(set(self._kinds) - set(self._handlers))
        if unhandled:
            raise ValidationError(
                f"no handler for job kind(s) {', '.join(unhandled)} "
                f"(handlers: {', '.join(sorted(self._handlers)) or 'none'})"
            )

    #: What :meth:`default_unit_of_work` gives each handler: a handler annotated with another
    #: class is refused when the worker is made (:func:`._arguments.handlers_fit`).
    unit_type: ClassVar[type] = TenantTransaction

    @classmethod
    def default_unit_of_work(cls, engine: Engine) -> UnitOfWorkFactory[U]:
        """The factory used when none is given: :class:`TenantTransaction` here.

        ``dms.DocumentWorker`` (:mod:`dms.worker`) overrides it with the tenant ``UnitOfWork``.
        """
        return cast(UnitOfWorkFactory[U], TenantTransaction.factory(engine))

    #: What :meth:`default_async_unit_of_work` gives each ``async def`` handler.
    async_unit_type: ClassVar[type] = AsyncTenantTransaction

    @classmethod
    def default_async_unit_of_work(cls, engine: AsyncEngine) -> UnitOfWorkFactory[Any]:
        """The factory of async handlers' units on the worker's async ``engine``, by default.

        :class:`AsyncTenantTransaction` here; ``dms.DocumentWorker`` gives
        ``dms.aio.AsyncUnitOfWork``.
        """
        return AsyncTenantTransaction.factory(engine)

    # --- parts ----------------------------------------------------------------------------

    def _runner(self) -> Part:
        return Runner(
            self._parts,
            ready=self._ready.threaded,
            handlers=self._handlers,
            unit_of_work=self._unit_of_work,
        )

    def _loop_runner(self) -> Part:
        loop = LoopRunner(
            self._parts,
            ready=self._ready.looped,
            slots=self.config.concurrency,
            handlers=cast(Mapping[str, AsyncHandler[Any]], self._handlers),
            engine=cast(AsyncEngine, self._async_engine),  # made: the worker has async handlers
            unit_of_work=self._async_unit_of_work,
        )
        self._loops.append(loop)  # a stop past its grace period cancels their handlers
        return loop

    def _claimer(self) -> Part:
        return Claimer(
            self._engine,
            worker_id=self.name,
            kinds=self._kinds,
            lease=self.config.lease,
            ready=self._ready,
            book=self._book,
            tally=self._tally,
            wakeup=self._wakeup,
            stopping=self._stopping,
            poll_seconds=self.config.poll_seconds,
        )

    def _completer(self) -> Part:
        return Completer(
            self._engine,
            name=self.name,
            acks=self._acks,
            book=self._book,
            tally=self._tally,
            batch_size=self.config.batch_size,
            runners_done=self._runners_done,
        )

    def _renewer(self) -> Part:
        return Renewer(
            self._engine,
            name=self.name,
            book=self._book,
            tally=self._tally,
            lease=self.config.lease,
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
            poll_seconds=self.config.poll_seconds,
        )

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Register the schedules; start runners, claimers, completer, renewer, ticker, listener.

        A schedule that cannot be registered (its tenant is gone) raises here, and nothing runs.
        """
        if self._started:
            raise ValidationError("this worker was already started")
        if self.config.schedules:
            with self._engine.begin() as conn:
                register_schedules(conn, self.config.schedules)
        self._started = True
        for _ in range(self.config.concurrency if self._threaded_kinds else 0):
            self._supervisor.start(RUNNER, self._runner)
        if self._looped_kinds:  # one event loop, ``concurrency`` jobs at once
            self._supervisor.start(RUNNER, self._loop_runner)
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
        grace = self.config.grace_seconds if grace_seconds is None else grace_seconds
        self._stopping.set()
        self._stop_requested.set()
        self._wakeup.wake()
        self._book.wake_all()
        deadline = time.monotonic() + grace
        # A claim under way when the stop came is handed out before the claimers end: it is
        # then held, and released below with the rest.
        self._supervisor.join("claimer", timeout=self.config.poll_seconds + 1.0)
        self._release_ready()
        if not self._supervisor.join(RUNNER, timeout=max(0.0, deadline - time.monotonic())):
            self._cancel_async_handlers()
        # Finished jobs waiting for their batched completion are completed before the rest
        # (jobs still running past the grace period) is released.
        self._runners_done.set()
        self._supervisor.join("completer", timeout=max(1.0, deadline - time.monotonic()))
        for claim in self._book.take_all():
            self._settler.release(claim)
        self._renewals_end.set()
        self._supervisor.join(
            "renewer", "ticker", "listener", timeout=self.config.poll_seconds + 1.0
        )
        self._withdraw()

    def _cancel_async_handlers(self) -> None:
        """Past the grace period: cancel async handlers (their units roll back) and wait briefly.

        Thread handlers cannot be interrupted: they run on, and their completion finds the
        lease gone.
        """
        if not self._loops:
            return
        for loop in self._loops:
            loop.cancel()
        self._supervisor.join(RUNNER, timeout=CANCEL_SECONDS)

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
        for claim in self._ready.take_all():
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


def _default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
