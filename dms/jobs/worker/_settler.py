"""Recording the outcome of a claim in its own transaction: fail, release, or give up.

Every settle is fenced (see :mod:`dms.jobs.settlement`): a claim whose lease was lost changes
nothing. Dropped connections are retried a few times; an outcome that cannot be recorded is
given up, and the claim is let go: its lease is renewed no more, and the next sweep of a
claimer (:mod:`._claimer`) gives the job back, or, if the database stays out of reach, its lease
expires and it is reclaimed (by this worker or another): never held.

A failure whose text PostgreSQL refuses (NUL, lone surrogates: issue 10, bug 2) or whose
backoff cannot be computed is recorded a second time with :func:`printable_error`, the
exception's type and message escaped, and the default backoff.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from functools import partial

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms.errors import LeaseLost
from dms.jobs._failures import escaped
from dms.jobs.backoff import Backoff
from dms.jobs.model import Job
from dms.jobs.settlement import fail, release
from dms.jobs.worker._book import Claim, ClaimBook
from dms.jobs.worker.stats import Tally

log = logging.getLogger(__name__)

#: Attempts at recording an outcome before giving it up to lease expiry.
SETTLE_TRIES = 3
#: Seconds before retrying a settle over a dropped connection, times the attempt.
RETRY_SECONDS = 0.2
#: Longest text of :func:`printable_error`.
PRINTABLE_CHARS = 4000


def printable_error(exc: BaseException) -> str:
    """``exc``, the exceptions it was raised from, and its traceback as text any database stores.

    The first line names each exception of the chain, the latest first (a failure to record a
    handler's error then still shows that error); non-ASCII characters (lone surrogates
    included) and NUL are escaped; of the traceback, the end is kept, where the exception and
    its innermost frames are.
    """
    summary = " <- ".join(
        escaped(_one_line(error), ascii_only=True)[:_SUMMARY_CHARS] for error in _chain(exc)
    )
    trace = escaped("".join(traceback.format_exception(exc)).rstrip(), ascii_only=True)
    room = max(0, PRINTABLE_CHARS - len(summary))
    if len(trace) > room:
        trace = "[...cut] " + trace[len(trace) - room :]
    return f"{summary}\n{trace}"


def printable_line(exc: BaseException) -> str:
    """The type and first line of ``exc``'s message, escaped as in :func:`printable_error`."""
    return escaped(_one_line(exc), ascii_only=True)[:_SUMMARY_CHARS]


#: Longest text of one exception in the summary line of :func:`printable_error`.
_SUMMARY_CHARS = 500


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _one_line(exc: BaseException) -> str:
    lines = str(exc).splitlines()
    return f"{type(exc).__qualname__}: {lines[0] if lines else ''}"


class Settler:
    """Records outcomes of claims for a worker's runners."""

    def __init__(
        self,
        engine: Engine,
        *,
        book: ClaimBook,
        tally: Tally,
        worker: str,
        backoff: Mapping[str, Backoff],
    ) -> None:
        """Settle through pooled connections of ``engine``; retries use ``backoff`` by kind."""
        self._engine = engine
        self._book = book
        self._tally = tally
        self._worker = worker
        self._backoff = backoff

    def fail(self, claim: Claim, error: str | BaseException, *, retry: bool = True) -> None:
        """Record a failed attempt of ``claim``; retried later unless ``retry`` is False.

        If the database refuses the error's text, it is recorded once more, printably.
        """
        job = claim.job
        backoff = self._backoff.get(job.kind)

        def record() -> _Outcome:
            outcome = self._record(
                job, "fail", lambda conn: fail(conn, job, error, backoff=backoff, retry=retry)
            )
            if outcome is _Outcome.REFUSED and isinstance(error, BaseException):
                outcome = self._record(job, "fail", _printable_failure(job, error))
            return outcome

        self._settle(claim, "failed", record)

    def fail_printably(self, claim: Claim, error: BaseException) -> None:
        """Record ``error`` escaped, with the default backoff: when nothing else records."""
        self._settle(
            claim,
            "failed",
            partial(self._record, claim.job, "fail", _printable_failure(claim.job, error)),
        )

    def release(self, claim: Claim) -> None:
        """Give ``claim`` back without counting its attempt (a stop, a dropped connection)."""
        self._settle(
            claim,
            "released",
            partial(self._record, claim.job, "release", partial(_release, claim.job)),
        )

    def _settle(self, claim: Claim, counter: str, record: Callable[[], _Outcome]) -> None:
        """Renew ``claim`` no more while ``record`` settles it, then let it go, whatever happens.

        The outcome is counted under ``counter``. Not recorded, the job is given back by a
        claimer's sweep (or reclaimed when its lease expires): never held. An exception from
        ``record`` asks for no sweep: it reaches the supervisor, whose salvage records the
        failure (:meth:`fail_printably`).
        """
        self._book.settling([claim])
        try:
            outcome = record()
        except BaseException:
            self._book.settled([claim])
            raise
        self._book.settled([claim], lost_track=outcome is _Outcome.UNRECORDED)
        self._count(counter, outcome)

    def _count(self, recorded: str, outcome: _Outcome) -> None:
        if outcome is _Outcome.RECORDED:
            self._tally.add(recorded)
        elif outcome is _Outcome.LOST:
            self._tally.add("lost")
        else:
            self._tally.add("abandoned")

    def _record(self, job: Job, action: str, statement: Callable[[Connection], Job]) -> _Outcome:
        """Run ``statement`` in its own transaction, retried over dropped connections."""
        for attempt in range(1, SETTLE_TRIES + 1):
            try:
                with self._engine.begin() as conn:
                    statement(conn)
            except LeaseLost:
                log.warning("worker %s: %s of job %s: lease lost", self._worker, action, job.id)
                return _Outcome.LOST
            except sa.exc.DBAPIError as exc:
                log.warning(
                    "worker %s: %s of job %s failed: %s", self._worker, action, job.id, exc.orig
                )
                if not exc.connection_invalidated:
                    return _Outcome.REFUSED  # the statement itself: trying again changes nothing
                time.sleep(RETRY_SECONDS * attempt)
            else:
                return _Outcome.RECORDED
        log.warning(
            "worker %s: giving up the %s of job %s; its lease will expire",
            self._worker,
            action,
            job.id,
        )
        return _Outcome.UNRECORDED


class _Outcome(enum.Enum):
    RECORDED = "recorded"
    LOST = "lost"  # the lease had passed to another claim
    REFUSED = "refused"  # the database refused the statement
    UNRECORDED = "unrecorded"  # the connection kept failing


def _release(job: Job, conn: Connection) -> Job:
    return release(conn, job)


def _printable_failure(job: Job, error: BaseException) -> Callable[[Connection], Job]:
    # Without the job's own backoff policy: it may be what broke the first record.
    plain = dataclasses.replace(job, backoff=None)
    text = printable_error(error)
    return lambda conn: fail(conn, plain, text)
