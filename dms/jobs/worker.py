"""Worker threads that run jobs in the current process.

::

    worker = Worker(engine, handlers={"revision.checksum": verify_checksum}, concurrency=4)
    worker.run_until_stopped()        # blocks; SIGTERM or SIGINT stop it gracefully

Threads of a worker: two **claimers** keep a local queue filled, claiming up to
``batch_size`` jobs per statement (:func:`~dms.jobs.claim_batch`), while one waits for
PostgreSQL the other's claim is decoded; together they hold one job per runner plus what the
runners finish in a few claim round trips at their current pace, at most ``prefetch``
(:mod:`dms.jobs.window`). They also take back jobs whose lease expired
(:func:`~dms.jobs.reclaim_expired`) every quarter of the lease and whenever a claim finds the
queue empty, so that the claim itself stays one ordered index scan of queued rows;
``concurrency`` **runner** threads run one job each, its handler inside a
:class:`~dms.uow.UnitOfWork` of the job's tenant; an **acknowledger** completes jobs many at a
time with :func:`~dms.jobs.complete_many`; a **listener** (``LISTEN`` on a dedicated
autocommit connection) wakes the claimers as soon as a job is enqueued, while polling every
``poll_seconds`` keeps working without it (behind PgBouncer in transaction mode pass
``listen=False`` or a direct ``listen_url``); a **heartbeat** renews the leases of held jobs
every third of the lease, so long jobs keep them.

A handler that executes anything on its unit of work has its job completed on that same unit of
work before the commit: the handler's writes and the job's ``done`` commit together or not at
all, and if the lease was lost meanwhile (another worker reclaimed the job) the fenced
completion raises :class:`~dms.errors.LeaseLost` and everything rolls back. A handler that never
touches the database has nothing to commit: its job goes to the acknowledger, whose batched
completion is fenced job by job in the same way; if the worker dies first, the lease expires
and the job runs again (at-least-once delivery).

Database errors in the worker's own statements (a connection killed by
``pg_terminate_backend``, a failover) are logged and retried with a fresh pooled connection; a
job whose connection died under its handler is released without an attempt penalty, and if even
that fails its lease expires and another claim takes it over. Create the engine with
``pool_pre_ping=True`` so that dead pooled connections are replaced before use.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from types import FrameType
from typing import Protocol, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, Connection, Engine

from dms.config import Settings
from dms.errors import LeaseLost, ValidationError
from dms.jobs.backoff import Backoff
from dms.jobs.claims import LEASE_SECONDS, reclaim_expired
from dms.jobs.model import Job, JobState
from dms.jobs.pipeline import claim_batch
from dms.jobs.settlement import complete, complete_many, fail, heartbeat, release
from dms.jobs.statements import NOTIFY_CHANNEL
from dms.jobs.validation import validate_lease
from dms.jobs.window import Window
from dms.uow import UnitOfWork

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Seconds an idle thread waits for a notification before it polls the queue anyway.
POLL_SECONDS = 2.0
#: Seconds that running jobs get to finish after a stop before they are released.
GRACE_SECONDS = 30.0
#: Most jobs claimed by one statement, and completed by one statement, by default.
BATCH_SIZE = 500
#: Most jobs a worker claims ahead of its runner threads, by default (see :mod:`.window`).
PREFETCH = 1000
#: Claimer threads, each with its own connection: while one claim waits for PostgreSQL, the
#: other's rows are decoded (bench/README.md).
_CLAIMERS = 2
#: Seconds between checks for a stop by idle runner and acknowledger threads.
_IDLE_CHECK_SECONDS = 0.5
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
    ``prefetch``: most jobs claimed ahead of the runners (default :data:`PREFETCH`). Within
    it, the worker claims ahead what its runners finish in a few claim round trips at their
    current pace, and at least one job per runner (:mod:`dms.jobs.window`): many short jobs
    get large claims, long jobs are not hoarded (a job claimed ahead waits for a runner of
    this worker only). ``batch_size``: most jobs per claim or completion statement.
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
        batch_size: int = BATCH_SIZE,
        prefetch: int = PREFETCH,
    ) -> None:
        """Configure the worker; nothing runs before :meth:`start`."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValidationError(f"concurrency must be a positive integer, not {concurrency!r}")
        if not all(callable(h) for h in handlers.values()):
            raise ValidationError("every handler must be callable")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValidationError(f"batch_size must be a positive integer, not {batch_size!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValidationError(f"prefetch must be a non-negative integer, not {prefetch!r}")
        validate_lease(lease)
        if poll_seconds <= 0 or grace_seconds < 0:
            raise ValidationError("poll_seconds must be positive, grace_seconds >= 0")
        self._engine = engine
        # Read once: reading the environment per job's unit of work was a third of the Python
        # time of a no-op job (profile in bench/README.md).
        self._settings = Settings.from_env()
        self._handlers = dict(handlers)
        self._kinds = tuple(sorted(set(handlers) if kinds is None else set(kinds)))
        if not self._kinds:
            raise ValidationError("the worker has no kinds to work: give handlers or kinds")
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._window = Window(floor=concurrency, ceiling=prefetch, now=time.monotonic())
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
        self._in_flight: dict[int, Job] = {}  # held: claimed, not yet settled; by _key
        self._running: dict[int, Job] = {}  # handed to a runner thread; by _key
        self._acking = 0  # of those in flight: finished, waiting for the acknowledger
        self._finished = 0  # jobs whose handler returned, since the start
        self._claiming = 0  # room reserved by claims under way
        self._waiting_claimers = 0  # claimers waiting for room
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._ready: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._acks: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._slots_done = threading.Event()
        self._slots: list[threading.Thread] = []
        self._acknowledger: threading.Thread | None = None
        self._helpers: list[threading.Thread] = []

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the runner threads, the claimer, acknowledger, heartbeat and listener."""
        if self._slots:
            raise ValidationError("this worker was already started")
        self._slots = [
            self._thread(self._run_slot, f"{self.name}/{index}")
            for index in range(self._concurrency)
        ]
        self._acknowledger = self._thread(self._acknowledge, f"{self.name}/ack")
        self._helpers = [
            *(self._thread(self._fetch, f"{self.name}/claim{n}") for n in range(_CLAIMERS)),
            self._thread(self._renew_leases, f"{self.name}/heartbeat"),
        ]
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
        with self._room:
            self._room.notify_all()
        deadline = time.monotonic() + grace
        for thread in self._slots:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        # Finished jobs waiting for their batched completion are completed before the rest
        # (jobs still running past the grace period, jobs never started) is released.
        self._slots_done.set()
        if self._acknowledger is not None:
            self._acknowledger.join(timeout=max(1.0, deadline - time.monotonic()))
        for job in self._take_in_flight():
            self._settle(job, "release", _releasing(job))
        for thread in self._helpers:
            thread.join(timeout=self._poll_seconds + 1.0)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every thread of the worker to end (after :meth:`stop`); True if all did.

        A handler that overran the grace period keeps its thread alive until it returns.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        threads = (*self._slots, *self._helpers, *filter(None, [self._acknowledger]))
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

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
            return tuple(self._running.values())

    # --- claiming -----------------------------------------------------------------------

    def _fetch(self, name: str) -> None:
        """A claimer: keep the local queue filled, one claim statement per batch.

        It also takes back jobs whose lease expired (:func:`~dms.jobs.reclaim_expired`), every
        quarter of the lease and, at most once a poll interval, whenever a claim finds nothing:
        the claim itself stays one index scan of queued rows.
        """
        # Not autocommit: the reclaims run in transactions begun here (claims in their own).
        session = _HeldSession(self._engine, autocommit=False)
        failures = 0
        reclaim_every = self._lease.total_seconds() / 4
        last_reclaim = -float("inf")
        try:
            while not self._stopping.is_set():
                seen = self._generation
                limit = self._reserve_room()
                if limit == 0:
                    continue
                claimed: list[Job] = []
                try:
                    if time.monotonic() - last_reclaim >= reclaim_every:
                        last_reclaim = time.monotonic()
                        session.run(self._reclaim)
                    claimed = self._timed_claim(session, limit)
                    if not claimed and time.monotonic() - last_reclaim >= self._poll_seconds:
                        last_reclaim = time.monotonic()
                        if session.run(self._reclaim):
                            continue  # jobs came back to the queue: claim them now
                except sa.exc.DBAPIError as exc:
                    failures += 1
                    log.warning("worker %s: claim failed (%s); retrying", name, exc.orig)
                    self._stopping.wait(_RETRY_SECONDS * 2 ** min(failures, _RETRY_DOUBLINGS))
                    continue
                finally:
                    self._hand_out(claimed, reserved=limit)
                failures = 0
                if len(claimed) < limit:  # the queue is drained: sleep until told or polling
                    self._wait_for_work(seen)
        finally:
            session.close()

    def _timed_claim(self, session: _HeldSession, limit: int) -> list[Job]:
        started = time.monotonic()
        claimed = session.run(partial(self._claim, limit=limit))
        with self._lock:
            self._window.round_trip(time.monotonic() - started)
        return claimed

    def _claim(self, conn: Connection, *, limit: int) -> list[Job]:
        return claim_batch(conn, self.name, kinds=self._kinds, limit=limit, lease=self._lease)

    def _reclaim(self, conn: Connection) -> bool:
        """Take back expired leases of this worker's kinds; True if any job is queued again."""
        with conn.begin():
            reclaimed = reclaim_expired(conn, kinds=self._kinds)
        for job in reclaimed:
            log.warning(
                "worker %s: lease of job %s (worker %s, attempt %d) expired; now %s",
                self.name,
                job.id,
                job.locked_by,
                job.attempts,
                job.state.value,
            )
        return any(job.state is JobState.QUEUED for job in reclaimed)

    def _reserve_room(self) -> int:
        """Block until a claim's worth of room is free, and reserve it for one claim.

        Returns how many jobs the claim may take (0 when stopping). The reservation lets several
        claimers claim at once without together exceeding the room; :meth:`_hand_out` returns it.
        """
        with self._room:
            self._window.finished(self._finished, time.monotonic())
            self._waiting_claimers += 1
            try:
                self._room.wait_for(
                    lambda: self._room_left() >= self._claim_at() or self._stopping.is_set(),
                    timeout=self._poll_seconds,
                )
            finally:
                self._waiting_claimers -= 1
            if self._stopping.is_set():
                return 0
            limit = min(self._batch_size, max(0, self._room_left()))
            self._claiming += limit
            return limit

    def _capacity(self) -> int:
        """Unfinished jobs to hold: one per runner plus those claimed ahead (lock held)."""
        return self._concurrency + self._window.ahead

    def _claim_at(self) -> int:
        """Room for a claim (lock held): half the capacity, so that claims come in batches."""
        return max(1, min(self._batch_size, self._capacity() // 2))

    def _room_left(self) -> int:
        """Jobs that may be claimed now (call with the lock held).

        Jobs that finished and only wait for the acknowledger need no runner: they do not count
        against the capacity, so the next claim overlaps the completion of earlier ones instead
        of waiting for their commit. At most a capacity's worth of them is allowed on top.
        """
        held = len(self._in_flight) + self._claiming
        capacity = self._capacity()
        return min(capacity - (held - self._acking), 2 * capacity - held)

    def _hand_out(self, claimed: list[Job], *, reserved: int) -> None:
        with self._lock:
            self._claiming -= reserved
            for job in claimed:
                self._in_flight[_key(job)] = job
            if len(claimed) < reserved:
                self._wake_claimers()  # room the claim did not use: another claimer may
        for job in claimed:
            self._ready.put(job)

    def _wake_claimers(self) -> None:
        """Wake waiting claimers once a claim's worth of room is free (call with the lock held).

        Not at every finished job: a claimer woken for less would only go back to sleep, and
        those wake-ups (a thread switch each, under the GIL) cost more than the job itself.
        """
        if self._waiting_claimers and self._room_left() >= self._claim_at():
            self._room.notify_all()

    # --- running ------------------------------------------------------------------------

    def _run_slot(self, name: str) -> None:
        while not self._stopping.is_set():
            try:
                job = self._ready.get(timeout=_IDLE_CHECK_SECONDS)
            except queue.Empty:
                continue
            if self._stopping.is_set():
                # Claimed but not started when stop() was called: it goes straight back.
                self._take_in_flight_job(job)
                self._settle(job, "release", _releasing(job))
                return
            self._process(job)

    def _process(self, job: Job) -> None:
        with self._lock:
            self._running[_key(job)] = job
        deferred = False
        try:
            deferred = self._settle_run(job)
        finally:
            self._finish(job, deferred=deferred)

    def _settle_run(self, job: Job) -> bool:
        """Run ``job`` and record its outcome; True if its completion waits for the acknowledger."""
        handler = self._handlers.get(job.kind)
        if handler is not None:
            return self._run_handler(handler, job)
        known = ", ".join(sorted(self._handlers)) or "none"
        error = f"no handler for job kind {job.kind!r} in this worker (handlers: {known})"
        self._settle(job, "fail", lambda conn: fail(conn, job, error, retry=False))
        return False

    def _finish(self, job: Job, *, deferred: bool) -> None:
        """Pass a job whose handler returned to the acknowledger (``deferred``), or let it go."""
        with self._lock:
            del self._running[_key(job)]
            self._finished += 1
            if deferred:
                # Stays in flight (its lease renewed) until the acknowledger has completed it.
                self._acking += 1
            else:
                self._in_flight.pop(_key(job), None)  # stop() may have taken it already
            self._wake_claimers()
        if deferred:
            self._acks.put(job)

    def _run_handler(self, handler: Handler, job: Job) -> bool:
        """Run ``handler``; True if it succeeded without using the database (completion deferred).

        A handler that executed anything on its unit of work has the job completed in that same
        transaction, so its writes and the completion commit together or not at all.
        """
        try:
            with _LazyUnitOfWork(self._engine, tenant=job.tenant, settings=self._settings) as uow:
                handler(uow, job)
                if not _used(uow):
                    return True
                complete(uow, job)
                uow.commit()
        except LeaseLost:
            log.warning(
                "worker %s: lost the lease of job %s; its writes rolled back", self.name, job.id
            )
        except sa.exc.DBAPIError as exc:
            if not exc.connection_invalidated:
                self._record_failure(job, exc)
                return False
            # Our connection died, not the job: run it again without counting this attempt.
            log.warning(
                "worker %s: connection lost running job %s; releasing it", self.name, job.id
            )
            self._settle(job, "release", lambda conn: release(conn, job))
        # Whatever a handler raises fails the attempt; the worker itself must go on.
        except Exception as exc:
            self._record_failure(job, exc)
        return False

    # --- acknowledging ------------------------------------------------------------------

    def _acknowledge(self, name: str) -> None:
        """The acknowledger: complete deferred jobs, many per fenced statement."""
        session = _HeldSession(self._engine)
        try:
            while True:
                try:
                    first = self._acks.get(timeout=_IDLE_CHECK_SECONDS)
                except queue.Empty:
                    if self._slots_done.is_set():
                        return
                    continue
                batch = [first]
                # All that waits, up to a batch: one statement for it all.
                while len(batch) < self._batch_size:
                    try:
                        batch.append(self._acks.get_nowait())
                    except queue.Empty:
                        break
                self._complete(session, batch)
        finally:
            session.close()

    def _complete(self, session: _HeldSession, batch: list[Job]) -> None:
        """Complete ``batch``; if it cannot be recorded, the leases expire and the jobs rerun."""
        try:
            for attempt in range(1, _SETTLE_TRIES + 1):
                try:
                    outcome = session.run(lambda conn: complete_many(conn, batch))
                except sa.exc.DBAPIError as exc:
                    log.warning("worker %s: completion failed: %s", self.name, exc.orig)
                    time.sleep(_RETRY_SECONDS * attempt)
                    continue
                # The acknowledger must outlive any error: the leases expire and the jobs rerun.
                except Exception:
                    log.exception("worker %s: completion of %d jobs failed", self.name, len(batch))
                    return
                for job in outcome.lost:
                    log.warning("worker %s: complete of job %s: lease lost", self.name, job.id)
                return
        finally:
            with self._lock:
                for job in batch:
                    self._in_flight.pop(_key(job), None)
                self._acking -= len(batch)
                self._wake_claimers()

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
            self._in_flight.pop(_key(job), None)
            self._wake_claimers()

    def _take_in_flight(self) -> list[Job]:
        with self._lock:
            leftovers = list(self._in_flight.values())
            self._in_flight.clear()
        return leftovers

    # --- waking up ----------------------------------------------------------------------

    def _wake(self) -> None:
        # Every claimer, also for a single job: they race, and the first to get the GIL and
        # the server wins. Waking only one raised the p99 enqueue-to-start latency from 4.3 to
        # 5.6 ms in alternating runs (bench/README.md).
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
            with self._lock:
                held = list(self._in_flight.values())
            for job in held:
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


class _HeldSession:
    """A connection held by one thread for its own statements, replaced after an error.

    A held connection pays neither a pool checkout nor a pre-ping per statement. Autocommit
    (the acknowledger's): a batched completion is one statement, hence one round trip. Without
    it (the claimer's), the caller begins and commits its transactions.
    """

    def __init__(self, engine: Engine, *, autocommit: bool = True) -> None:
        self._engine = engine
        self._autocommit = autocommit
        self._conn: Connection | None = None

    def run(self, statement: Callable[[Connection], _T]) -> _T:
        """Run ``statement`` on the held connection (opened if needed); drop it on errors."""
        if self._conn is None:
            conn = self._engine.connect()
            self._conn = (
                conn.execution_options(isolation_level="AUTOCOMMIT") if self._autocommit else conn
            )
        try:
            return statement(self._conn)
        except sa.exc.DBAPIError:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except sa.exc.DBAPIError as exc:
                log.debug("closing a broken connection: %s", exc.orig)


class _LazyUnitOfWork(UnitOfWork):
    """A unit of work that takes a pooled connection only when the handler first uses it.

    A handler that never touches the database then costs no pool checkout (and no pre-ping
    round trip): profiling showed that checkout as the largest cost of a no-op job.
    """

    _opened = False

    def __enter__(self) -> _LazyUnitOfWork:
        """Open nothing yet."""
        return self

    @property
    def connection(self) -> Connection:
        """The routed connection, opened (and its transaction begun) on first use."""
        if not self._opened:
            self._opened = True
            super().__enter__()
        return super().connection

    @property
    def opened(self) -> bool:
        """Whether the handler asked for the connection."""
        return self._opened


def _used(uow: _LazyUnitOfWork) -> bool:
    """Whether anything was executed on the unit of work (its transaction has begun)."""
    if not uow.opened:
        return False
    driver = uow.connection.connection.driver_connection
    return isinstance(driver, psycopg.Connection) and (
        driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    )


def _key(job: Job) -> int:
    """The key of ``job`` in the worker's tables: its id as an integer.

    Hashing a ``uuid.UUID`` runs Python code (``UUID.__hash__``); an ``int`` hashes in C, and
    a job is looked up four times on its way through a worker.
    """
    return job.id.int


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
