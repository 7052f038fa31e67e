"""A runner: takes claimed jobs one at a time and runs each handler in its unit of work.

A handler that executes anything on its unit of work has its job completed on that same unit
before the commit: the handler's writes and the job's ``done`` commit together or not at all,
and if the lease was lost meanwhile (another worker reclaimed the job) the fenced completion
raises :class:`~dms.errors.LeaseLost` and everything rolls back. A handler that never touches
the database has nothing to commit: its claim goes to the batch completer
(:mod:`._completer`). Whatever a handler raises fails the attempt (fenced, through the
:class:`~.settler.Settler`), logged at WARNING with the job's id, kind and tenant; retried with
backoff, but for a :class:`~dms.errors.PermanentFailure` or a
:class:`~dms.errors.ValidationError` (:data:`HOPELESS`), dead at once.

A job whose connection died under its handler, or could not be made
(:class:`~dms.errors.DatabaseUnreachable`), is released without an attempt penalty. An
exception that escapes all this (a bug, or a failure that cannot even be recorded) ends the
runner: its supervisor logs it, records the failure of the job it ran (:meth:`Runner.salvage`)
and starts another runner.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import sqlalchemy as sa

from dms.errors import DatabaseUnreachable, LeaseLost, PermanentFailure, ValidationError
from dms.jobs.model import Job
from dms.jobs.settlement import complete
from dms.jobs.worker._book import Claim, ClaimBook
from dms.jobs.worker._settler import Settler, printable_line
from dms.jobs.worker.stats import Tally
from dms.jobs.worker.unit import JobUnitOfWork, UnitOfWorkFactory, wrote

log = logging.getLogger(__name__)

U_contra = TypeVar("U_contra", contravariant=True)
U = TypeVar("U", bound=JobUnitOfWork)

#: Seconds between checks for a stop by an idle runner.
IDLE_CHECK_SECONDS = 0.5
#: What a handler raises when no retry can help: the job goes dead at once, the exception's
#: text its last error. A PermanentFailure says so; a ValidationError (any subclass) is bad
#: input, which never becomes good by waiting.
HOPELESS: tuple[type[Exception], ...] = (PermanentFailure, ValidationError)


class Handler(Protocol[U_contra]):
    """What runs a job: write through ``uow`` (never commit it); raise to fail the attempt."""

    def __call__(self, uow: U_contra, job: Job, /) -> None:
        """Do the work of ``job`` inside its tenant's unit of work."""


class AsyncHandler(Protocol[U_contra]):
    """An ``async def`` handler: as :class:`Handler`, awaited on the worker's event loop."""

    async def __call__(self, uow: U_contra, job: Job, /) -> None:
        """Do the work of ``job`` inside its tenant's async unit of work."""


@dataclass(frozen=True, kw_only=True)
class RunnerParts:
    """What every runner of a worker shares: its acks queue, book, settler, counters, stop."""

    name: str
    acks: queue.SimpleQueue[Claim]
    book: ClaimBook
    settler: Settler
    tally: Tally
    stopping: threading.Event


class Outcomes:
    """How a runner records the end of a handler that did not complete its job."""

    def __init__(self, parts: RunnerParts) -> None:
        """Record through ``parts`` (the worker's settler and counters)."""
        self._name = parts.name
        self._acks = parts.acks
        self._book = parts.book
        self._settler = parts.settler
        self._tally = parts.tally
        self._stopping = parts.stopping

    def crashed(self, claim: Claim, error: BaseException) -> None:
        """Let ``claim`` go and record its failure printably: ``error`` would end a runner.

        A bug of the worker, or what a handler raised beyond ``Exception`` (``SystemExit``).
        """
        self._book.finish(claim, deferred=False)
        self._settler.fail_printably(claim, error)

    def ended_badly(self, claim: Claim, exc: Exception) -> None:
        """Record what ``exc``, raised by the handler of ``claim`` or its completion, means.

        The lease lost: nothing (another worker has the job; the writes rolled back). The
        connection lost: released, without an attempt penalty. Anything else: a failed attempt,
        retried unless it is :data:`HOPELESS` (dead at once).
        """
        if isinstance(exc, LeaseLost):
            log.warning(
                "worker %s: lost the lease of job %s; its writes rolled back",
                self._name,
                claim.job.id,
            )
            self._tally.add("lost")
        elif _connection_lost(exc):
            # Our connection died (or a new one was refused), not the job: run it again
            # without counting this attempt.
            log.warning(
                "worker %s: connection lost running job %s; releasing it",
                self._name,
                claim.job.id,
            )
            self._settler.release(claim)
        else:
            self._failed(claim, exc)

    def _failed(self, claim: Claim, exc: Exception) -> None:
        job = claim.job
        # The error's first line, escaped and capped: a log line must stay
        # short, and valid UTF-8 for whatever carries it (a lone surrogate breaks encoders).
        log.warning(
            "worker %s: job %s (kind %s, tenant %s) attempt %d failed: %s",
            self._name,
            job.id,
            job.kind,
            job.tenant,
            job.attempts,
            printable_line(exc),
        )
        self._settler.fail(claim, exc, retry=not isinstance(exc, HOPELESS))


def _connection_lost(exc: Exception) -> bool:
    """Whether ``exc`` says the handler's connection died, or could not be made.

    A connection that a pool opens to replace a dead one can be cut while it connects (a
    failover, ``pg_terminate_backend``): that is :class:`~dms.errors.DatabaseUnreachable`.
    """
    if isinstance(exc, DatabaseUnreachable):
        return True
    return isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated


class Runner(Outcomes, Generic[U]):
    """Runs claims from ``ready`` until the worker stops; one thread each."""

    def __init__(
        self,
        parts: RunnerParts,
        *,
        ready: queue.SimpleQueue[Claim],
        handlers: Mapping[str, Handler[U]],
        unit_of_work: UnitOfWorkFactory[U],
    ) -> None:
        """A runner of the worker whose ``parts`` it shares, taking claims from ``ready``."""
        super().__init__(parts)
        self._ready = ready
        self._handlers = handlers
        self._unit_of_work = unit_of_work
        self.current: Claim | None = None

    def run(self) -> None:
        """Run claims until the worker stops; a claim taken after the stop is released."""
        while not self._stopping.is_set():
            try:
                claim = self._ready.get(timeout=IDLE_CHECK_SECONDS)
            except queue.Empty:
                continue
            self.current = claim
            if self._stopping.is_set():
                self._settler.release(claim)  # claimed but never started: straight back
                return
            self.process(claim)
            self.current = None

    def salvage(self, error: BaseException) -> None:
        """After this runner failed: record the failure of the job it ran, printably."""
        claim, self.current = self.current, None
        if claim is not None:
            self.crashed(claim, error)

    def process(self, claim: Claim) -> None:
        """Run ``claim``'s handler and settle it, or hand it to the completer."""
        if not self._book.start(claim):
            return  # let go meanwhile (a stop): it was released
        # The worker claims only kinds it has handlers for (checked when it was made).
        deferred = self._run(self._handlers[claim.job.kind], claim)
        if self._book.finish(claim, deferred=deferred):
            self._acks.put(claim)

    def _run(self, handler: Handler[U], claim: Claim) -> bool:
        """Run ``handler``; True if it succeeded without using the database (completion deferred).

        The outcome of any other ending is recorded here.
        """
        job = claim.job
        try:
            unit = self._unit_of_work(tenant=job.tenant)
            with unit:
                handler(unit, job)
                if not wrote(unit):
                    return True
                self._book.settling([claim])
                complete(unit.connection, job)
                unit.commit()
            self._tally.add("completed")
        # Whatever a handler raises fails the attempt; the runner itself goes on.
        except Exception as exc:
            self.ended_badly(claim, exc)
        return False
