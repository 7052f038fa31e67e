"""Worker threads that run jobs in the current process.

::

    worker = Worker(engine, handlers={"revision.checksum": verify_checksum}, concurrency=4)
    worker.run_until_stopped()        # blocks; SIGTERM or SIGINT stop it gracefully

Each of the ``concurrency`` threads claims one job at a time in a short transaction, then runs
its handler inside a :class:`~dms.uow.UnitOfWork` of the job's tenant and completes the job on
that same unit of work before committing: the handler's writes and the job's ``done`` commit
together or not at all. If the lease was lost meanwhile (another worker reclaimed the job), the
fenced completion raises :class:`~dms.errors.LeaseLost` and everything rolls back.

Two helper threads: a listener (``LISTEN`` on a dedicated autocommit connection) wakes idle
threads as soon as a job is enqueued, while polling every ``poll_seconds`` keeps working without
it (behind PgBouncer in transaction mode pass ``listen=False`` or a direct ``listen_url``); a
heartbeat renews the leases of running jobs every third of the lease, so long jobs keep them.

Database errors in the worker's own statements (a connection killed by
``pg_terminate_backend``, a failover) are logged and retried with a fresh pooled connection; a
job whose connection died under its handler is released without an attempt penalty, and if even
that fails its lease expires and another claim takes it over. Create the engine with
``pool_pre_ping=True`` so that dead pooled connections are replaced before use.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from types import FrameType
from typing import Protocol

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, Connection, Engine

from dms.errors import LeaseLost, ValidationError
from dms.jobs.backoff import Backoff
from dms.jobs.model import Job
from dms.jobs.queue import (
    LEASE_SECONDS,
    NOTIFY_CHANNEL,
    complete,
    dequeue,
    fail,
    heartbeat,
    release,
)
from dms.uow import UnitOfWork

log = logging.getLogger(__name__)

#: Seconds an idle thread waits for a notification before it polls the queue anyway.
POLL_SECONDS = 2.0
#: Seconds that running jobs get to finish after a stop before they are released.
GRACE_SECONDS = 30.0
#: Seconds to wait before retrying after a database error, doubled up to this many times.
_RETRY_SECONDS = 0.2
_RETRY_DOUBLINGS = 5
#: Attempts at recording an outcome (fail, release) before leaving it to lease expiry.
_SETTLE_TRIES = 3


class Handler(Protocol):
    """What runs a job: write through ``uow`` (never commit it); raise to fail the attempt."""

    def __call__(self, uow: UnitOfWork, job: Job, /) -> None:
        """Do the work of ``job`` inside its tenant's unit of work."""


class Worker:
    """``concurrency`` threads that claim jobs of ``kinds`` and run their handlers.

    ``kinds`` defaults to the kinds of ``handlers``. A claimed job whose kind has no handler
    (``kinds`` names more than ``handlers``) goes to the dead letter at once with an error
    naming the kind: no retry on this worker could run it; requeue it once a worker can.
    ``backoff`` sets retry policies per kind (a job's own policy still wins).
    """

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, Handler],
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
    ) -> None:
        """Configure the worker; nothing runs before :meth:`start`."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValidationError(f"concurrency must be a positive integer, not {concurrency!r}")
        if not all(callable(h) for h in handlers.values()):
            raise ValidationError("every handler must be callable")
        if lease <= timedelta(0) or poll_seconds <= 0 or grace_seconds < 0:
            raise ValidationError("lease and poll_seconds must be positive, grace_seconds >= 0")
        self._engine = engine
        self._handlers = dict(handlers)
        self._kinds = tuple(sorted(set(handlers) if kinds is None else set(kinds)))
        if not self._kinds:
            raise ValidationError("the worker has no kinds to work: give handlers or kinds")
        self._concurrency = concurrency
        self._lease = lease
        self._poll_seconds = poll_seconds
        self._grace_seconds = grace_seconds
        self._backoff = dict(backoff or {})
        self._listen_url = _listen_url(engine, listen_url) if listen else None
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._wakeup = threading.Condition()
        self._generation = 0
        self._in_flight: dict[uuid.UUID, Job] = {}
        self._lock = threading.Lock()
        self._slots: list[threading.Thread] = []
        self._helpers: list[threading.Thread] = []

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker threads (and the listener and heartbeat threads)."""
        if self._slots:
            raise ValidationError("this worker was already started")
        self._slots = [
            self._thread(self._run_slot, f"{self.name}/{index}")
            for index in range(self._concurrency)
        ]
        self._helpers = [self._thread(self._renew_leases, f"{self.name}/heartbeat")]
        if self._listen_url is not None:
            self._helpers.append(self._thread(self._listen, f"{self.name}/listen"))

    def _thread(self, target: Callable[..., None], name: str) -> threading.Thread:
        # Daemon threads: a handler stuck past the grace period must not keep the process alive.
        thread = threading.Thread(target=target, args=(name,), name=name, daemon=True)
        thread.start()
        return thread

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stop claiming; give running jobs ``grace_seconds`` to finish; release the rest.

        A released job goes back to ``queued`` without an attempt penalty; if its handler
        finishes later anyway, its completion raises ``LeaseLost`` and its writes roll back.
        """
        grace = self._grace_seconds if grace_seconds is None else grace_seconds
        self._stopping.set()
        self._stop_requested.set()
        self._wake()
        deadline = time.monotonic() + grace
        for thread in self._slots:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for job in self._take_in_flight():
            self._settle(job, "release", _releasing(job))
        for thread in self._helpers:
            thread.join(timeout=self._poll_seconds + 1.0)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every thread of the worker to end (after :meth:`stop`); True if all did.

        A handler that overran the grace period keeps its thread alive until it returns.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in (*self._slots, *self._helpers):
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in (*self._slots, *self._helpers))

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

    def __enter__(self) -> Worker:
        """Start the worker."""
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Stop the worker gracefully."""
        self.stop()

    @property
    def running_jobs(self) -> tuple[Job, ...]:
        """The jobs this worker is running right now."""
        with self._lock:
            return tuple(self._in_flight.values())

    # --- claiming and running -----------------------------------------------------------

    def _run_slot(self, worker_id: str) -> None:
        failures = 0
        while not self._stopping.is_set():
            seen = self._generation
            try:
                job = self._claim(worker_id)
            except sa.exc.DBAPIError as exc:
                failures += 1
                log.warning("worker %s: claim failed (%s); retrying", worker_id, exc.orig)
                self._stopping.wait(_RETRY_SECONDS * 2 ** min(failures, _RETRY_DOUBLINGS))
                continue
            failures = 0
            if job is None:
                self._wait_for_work(seen)
            elif self._stopping.is_set():
                # Claimed while stop() was called: it has not started, so it goes straight back.
                self._take_in_flight_job(job)
                self._settle(job, "release", _releasing(job))
            else:
                self._process(job)

    def _claim(self, worker_id: str) -> Job | None:
        with self._engine.begin() as conn:
            claimed = dequeue(conn, worker_id, kinds=self._kinds, limit=1, lease=self._lease)
        if not claimed:
            return None
        with self._lock:
            self._in_flight[claimed[0].id] = claimed[0]
        return claimed[0]

    def _process(self, job: Job) -> None:
        try:
            handler = self._handlers.get(job.kind)
            if handler is None:
                known = ", ".join(sorted(self._handlers)) or "none"
                error = f"no handler for job kind {job.kind!r} in this worker (handlers: {known})"
                self._settle(job, "fail", lambda conn: fail(conn, job, error, retry=False))
            else:
                self._run_handler(handler, job)
        finally:
            self._take_in_flight_job(job)

    def _run_handler(self, handler: Handler, job: Job) -> None:
        try:
            with UnitOfWork(self._engine, tenant=job.tenant) as uow:
                handler(uow, job)
                complete(uow, job)
                uow.commit()
        except LeaseLost:
            log.warning(
                "worker %s: lost the lease of job %s; its writes rolled back", self.name, job.id
            )
        except sa.exc.DBAPIError as exc:
            if not exc.connection_invalidated:
                self._record_failure(job, exc)
                return
            # Our connection died, not the job: run it again without counting this attempt.
            log.warning(
                "worker %s: connection lost running job %s; releasing it", self.name, job.id
            )
            self._settle(job, "release", lambda conn: release(conn, job))
        # Whatever a handler raises fails the attempt; the worker itself must go on.
        except Exception as exc:
            self._record_failure(job, exc)

    def _record_failure(self, job: Job, exc: BaseException) -> None:
        backoff = self._backoff.get(job.kind)
        log.info("worker %s: job %s attempt %d failed: %s", self.name, job.id, job.attempts, exc)
        self._settle(job, "fail", lambda conn: fail(conn, job, exc, backoff=backoff))

    def _settle(self, job: Job, action: str, statement: Callable[[Connection], Job]) -> None:
        """Record an outcome in its own transaction, retrying over a dropped connection.

        If it cannot be recorded, the lease expires and another claim takes the job over.
        """
        for attempt in range(1, _SETTLE_TRIES + 1):
            try:
                with self._engine.begin() as conn:
                    statement(conn)
            except LeaseLost:
                log.warning(
                    "worker %s: %s of job %s: lease already lost", self.name, action, job.id
                )
                return
            except sa.exc.DBAPIError as exc:
                log.warning(
                    "worker %s: %s of job %s failed: %s", self.name, action, job.id, exc.orig
                )
                time.sleep(_RETRY_SECONDS * attempt)
            else:
                return

    def _take_in_flight_job(self, job: Job) -> None:
        with self._lock:
            self._in_flight.pop(job.id, None)

    def _take_in_flight(self) -> list[Job]:
        with self._lock:
            leftovers = list(self._in_flight.values())
            self._in_flight.clear()
        return leftovers

    # --- waking up ----------------------------------------------------------------------

    def _wake(self) -> None:
        with self._wakeup:
            self._generation += 1
            self._wakeup.notify_all()

    def _wait_for_work(self, seen: int) -> None:
        """Sleep until a notification newer than ``seen``, a stop, or the next poll."""
        with self._wakeup:
            self._wakeup.wait_for(
                lambda: self._generation != seen or self._stopping.is_set(),
                timeout=self._poll_seconds,
            )

    def _listen(self, name: str) -> None:
        url = self._listen_url
        while url is not None and not self._stopping.is_set():
            try:
                with _listening(url) as notifications:
                    # Jobs enqueued while we were not listening must not wait for a poll.
                    self._wake()
                    for _ in notifications(self._stopping):
                        self._wake()
            except psycopg.Error as exc:
                log.warning(
                    "worker %s: LISTEN connection failed (%s); polling meanwhile", name, exc
                )
                self._stopping.wait(self._poll_seconds)

    # --- leases -------------------------------------------------------------------------

    def _renew_leases(self, name: str) -> None:
        interval = self._lease.total_seconds() / 3
        while not self._stopping.wait(interval):
            for job in self.running_jobs:
                self._renew(job)

    def _renew(self, job: Job) -> None:
        try:
            with self._engine.begin() as conn:
                heartbeat(conn, job, lease=self._lease)
        except LeaseLost:
            log.warning("worker %s: job %s was reclaimed by another worker", self.name, job.id)
        except sa.exc.DBAPIError as exc:
            # The next round tries again; the lease is three intervals long.
            log.warning("worker %s: heartbeat of job %s failed: %s", self.name, job.id, exc.orig)


def _releasing(job: Job) -> Callable[[Connection], Job]:
    return lambda conn: release(conn, job)


def _listen_url(engine: Engine, listen_url: str | URL | None) -> str:
    url = sa.make_url(listen_url) if listen_url is not None else engine.url
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _listening(
    url: str,
) -> Iterator[Callable[[threading.Event], Iterator[psycopg.Notify]]]:
    """A dedicated autocommit connection that LISTENs on :data:`NOTIFY_CHANNEL`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))

        def notifications(stopping: threading.Event) -> Iterator[psycopg.Notify]:
            while not stopping.is_set():
                # A short timeout: the loop checks for a stop at least once a second.
                yield from conn.notifies(timeout=1.0)

        yield notifications
