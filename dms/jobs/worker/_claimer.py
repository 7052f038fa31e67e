"""A claimer: keeps the runners' queue filled, one claim statement per batch.

Two claimers run, each with its own connection: while one waits for PostgreSQL the other's
rows are decoded (bench/README.md). A claim takes as many jobs as the claim window leaves room
for (:mod:`._window`, :class:`~._book.ClaimBook`). A claimer also takes back jobs whose lease
expired (:func:`~dms.jobs.reclaim_expired`) every quarter of the lease and, at most once a
poll interval, whenever a claim finds nothing: the claim itself stays one index scan of
queued rows. Database errors are logged and retried with a fresh connection, waiting longer
after each (up to a few seconds).

A failed claim may have committed all the same (the connection cut after ``COMMIT``, before the
reply): its jobs run under this worker's name and no part of it knows. So after a failed claim,
and after any part gave up recording an outcome, a claimer **sweeps** before it claims again
(:meth:`~.claims.ClaimBook.begin_sweep`, :func:`~dms.jobs.claims.release_unheld`): those jobs go
back to the queue at once instead of waiting out their lease, and count as released.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Collection
from datetime import timedelta
from functools import partial

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms.jobs._rows import Claimed
from dms.jobs.claims import next_after, reclaim_expired, release_unheld
from dms.jobs.model import Job, JobState
from dms.jobs.pipeline import claim_outcome
from dms.jobs.worker._book import ClaimBook
from dms.jobs.worker._ready import ReadyQueues
from dms.jobs.worker._session import HeldSession
from dms.jobs.worker._wakeup import Wakeup
from dms.jobs.worker.stats import Tally

log = logging.getLogger(__name__)

#: Seconds to wait before retrying after a database error, doubled up to this many times.
RETRY_SECONDS = 0.2
RETRY_DOUBLINGS = 5
#: Seconds a claimer waits, at most, after a short claim that walked a tenant with limits: the
#: limit may let more start soon (a job finished, tokens refilled), which no notification says.
LIMITED_POLL_SECONDS = 0.05


class Claimer:
    """Claims jobs of ``kinds`` for ``worker_id`` into ``ready`` while there is room."""

    def __init__(
        self,
        engine: Engine,
        *,
        worker_id: str,
        kinds: Collection[str],
        lease: timedelta,
        ready: ReadyQueues,
        book: ClaimBook,
        tally: Tally,
        wakeup: Wakeup,
        stopping: threading.Event,
        poll_seconds: float,
    ) -> None:
        """Claim through a connection of ``engine`` held for the purpose."""
        # Not autocommit: reclaims run in transactions begun here (claims in their own).
        self._session = HeldSession(engine, autocommit=False)
        self._worker_id = worker_id
        self._kinds = tuple(kinds)
        # Where the next claim's walk of tenants starts: claims go round every tenant.
        self._after_tenant = ""
        # Whether the last claim saw limits: then the next one takes the limited tenants' locks.
        self._limits = True
        self._lease = lease
        self._ready = ready
        self._book = book
        self._tally = tally
        self._wakeup = wakeup
        self._stopping = stopping
        self._poll_seconds = poll_seconds
        self._reclaim_every = lease.total_seconds() / 4
        self._last_reclaim = -float("inf")
        self._failures = 0

    def run(self) -> None:
        """Claim until the worker stops."""
        try:
            while not self._stopping.is_set():
                self.claim_once()
        finally:
            self._session.close()

    def salvage(self, error: BaseException) -> None:
        """Nothing to settle: claims are handed out as soon as they are made."""

    def claim_once(self) -> None:
        """Sweep if due; wait for room, claim into it; sleep until woken if the queue is drained."""
        held = self._book.begin_sweep(timeout=self._poll_seconds)
        if held is not None:
            self._sweep(held)
        seen = self._wakeup.generation
        limit = self._book.reserve(self._stopping, timeout=self._poll_seconds, now=time.monotonic())
        if limit == 0:
            return
        jobs: list[Job] = []
        limited = False
        try:
            jobs, limited, _ = self._claim(limit)
        except sa.exc.DBAPIError as exc:
            self._book.suspect()
            self._failed("claim failed", exc)
            return
        finally:
            for claim in self._book.claimed(jobs, reserved=limit):
                self._ready.put(claim)
        self._failures = 0
        if len(jobs) < limit:  # the queue is drained (or limited): sleep until told or polling
            self._wakeup.wait(seen, self._poll_seconds if not limited else LIMITED_POLL_SECONDS)

    def _failed(self, what: str, exc: sa.exc.DBAPIError) -> None:
        """Log ``exc`` and wait longer after each failure in a row."""
        self._failures += 1
        log.warning("worker %s: %s (%s); retrying", self._worker_id, what, exc.orig)
        self._stopping.wait(RETRY_SECONDS * 2 ** min(self._failures, RETRY_DOUBLINGS))

    def _sweep(self, held: frozenset[uuid.UUID]) -> None:
        """Give back the jobs running under this worker's name that it does not hold."""
        released: list[Job] = []
        try:
            released = self._session.run(partial(self._release_unheld, held))
        except sa.exc.DBAPIError as exc:
            self._book.end_sweep(clean=False)
            self._failed("looking for claims it lost track of failed", exc)
            return
        self._book.end_sweep(clean=True)
        self._tally.add("released", len(released))
        for job in released:
            log.warning(
                "worker %s: job %s (attempt %d) was claimed but lost track of (a reply or an "
                "outcome lost with a connection); released",
                self._worker_id,
                job.id,
                job.attempts + 1,
            )

    def _release_unheld(self, held: frozenset[uuid.UUID], conn: Connection) -> list[Job]:
        with conn.begin():
            return release_unheld(conn, self._worker_id, held=held)

    def _claim(self, limit: int) -> Claimed:
        if time.monotonic() - self._last_reclaim >= self._reclaim_every:
            self._last_reclaim = time.monotonic()
            self._session.run(self._reclaim)
        claimed = self._timed_claim(limit)
        if not claimed.jobs and time.monotonic() - self._last_reclaim >= self._poll_seconds:
            self._last_reclaim = time.monotonic()
            if self._session.run(self._reclaim):
                claimed = self._timed_claim(limit)  # jobs came back to the queue: claim them now
        return claimed

    def _timed_claim(self, limit: int) -> Claimed:
        started = time.monotonic()
        claimed = self._session.run(
            lambda conn: claim_outcome(
                conn,
                self._worker_id,
                kinds=self._kinds,
                limit=limit,
                lease=self._lease,
                after_tenant=self._after_tenant,
                limits=self._limits,
            )
        )
        self._limits = self._wakeup.limited = claimed.limits
        self._book.round_trip(time.monotonic() - started)
        self._after_tenant = next_after(claimed.jobs, limit, self._after_tenant)
        return claimed

    def _reclaim(self, conn: Connection) -> bool:
        """Take back expired leases of this worker's kinds; True if any job is queued again."""
        with conn.begin():
            reclaimed = reclaim_expired(conn, kinds=self._kinds)
        for job in reclaimed:
            log.warning(
                "worker %s: lease of job %s (worker %s, attempt %d) expired; now %s",
                self._worker_id,
                job.id,
                job.locked_by,
                job.attempts,
                job.state.value,
            )
        return any(job.state is JobState.QUEUED for job in reclaimed)
