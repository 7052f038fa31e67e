"""The batch completer: completes the jobs whose handlers never touched the database.

One fenced statement (:func:`~dms.jobs.complete_many`) completes everything that waits, up
to a batch; each job is matched on its own claim, so a job reclaimed meanwhile is left alone
and reported. If a batch cannot be recorded its claims are let go: a claimer's sweep gives
the jobs back (or their leases expire) and they run again (at-least-once delivery for handlers
without writes).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms.jobs.settlement import Completion, complete_many
from dms.jobs.worker._book import Claim, ClaimBook
from dms.jobs.worker._session import HeldSession
from dms.jobs.worker.stats import Tally

log = logging.getLogger(__name__)

#: Seconds between checks for the end by an idle completer.
IDLE_CHECK_SECONDS = 0.5
#: Attempts at completing a batch over dropped connections.
COMPLETE_TRIES = 3
#: Seconds before retrying a batch, times the attempt.
RETRY_SECONDS = 0.2


def take_batch(
    first: Claim, more: Callable[[], Claim | None], limit: int
) -> tuple[list[Claim], Claim | None]:
    """``first`` and what ``more`` yields, up to ``limit`` claims of distinct jobs.

    Returns the batch and the claim that stopped it, if any: a second claim of a job already
    in the batch (a release and a new claim of the same job), which goes in the next batch,
    because one statement completes a job once.
    """
    batch = [first]
    seen = {first.job.id.int}
    while len(batch) < limit:
        claim = more()
        if claim is None:
            break
        if claim.job.id.int in seen:
            return batch, claim
        seen.add(claim.job.id.int)
        batch.append(claim)
    return batch, None


class Completer:
    """Completes claims from ``acks`` in batches until the runners are done and it is empty."""

    def __init__(
        self,
        engine: Engine,
        *,
        name: str,
        acks: queue.SimpleQueue[Claim],
        book: ClaimBook,
        tally: Tally,
        batch_size: int,
        runners_done: threading.Event,
    ) -> None:
        """Complete through a connection of ``engine`` held for the purpose."""
        self._session = HeldSession(engine)
        self._name = name
        self._acks = acks
        self._book = book
        self._tally = tally
        self._batch_size = batch_size
        self._runners_done = runners_done
        self._carried: Claim | None = None
        self.current: list[Claim] = []

    def run(self) -> None:
        """Complete batches until the runners are done and nothing waits."""
        try:
            while True:
                first = self._next(timeout=IDLE_CHECK_SECONDS)
                if first is None:
                    if self._runners_done.is_set():
                        return
                    continue
                self.current, self._carried = take_batch(first, self._more, self._batch_size)
                self._complete(self.current)
                self.current = []
        finally:
            self._session.close()

    def salvage(self, error: BaseException) -> None:
        """After a failure: let the batch under way go (swept or expired, the jobs rerun)."""
        claims, self.current = self.current, []
        if self._carried is not None:
            self._acks.put(self._carried)
            self._carried = None
        self._book.settled(claims, lost_track=True)
        self._tally.add("abandoned", len(claims))

    def _next(self, timeout: float) -> Claim | None:
        if self._carried is not None:
            claim, self._carried = self._carried, None
            return claim
        try:
            return self._acks.get(timeout=timeout)
        except queue.Empty:
            return None

    def _more(self) -> Claim | None:
        try:
            return self._acks.get_nowait()
        except queue.Empty:
            return None

    def _complete(self, batch: list[Claim]) -> None:
        """Complete ``batch``; if it cannot be recorded, the jobs are swept and rerun."""
        self._book.settling(batch)
        outcome: Completion | None = None
        try:
            outcome = self._attempt(batch)
        finally:
            # Not completed (given up, or an exception: then salvaged), a claimer's sweep gives
            # the jobs back.
            self._book.settled(batch, lost_track=outcome is None)
        if outcome is None:
            log.warning("worker %s: giving up completing %d jobs", self._name, len(batch))
            self._tally.add("abandoned", len(batch))
            return
        self._tally.add("completed", len(outcome.completed))
        self._tally.add("lost", len(outcome.lost))
        for job in outcome.lost:
            log.warning("worker %s: complete of job %s: lease lost", self._name, job.id)

    def _attempt(self, batch: list[Claim]) -> Completion | None:
        jobs = [claim.job for claim in batch]
        for attempt in range(1, COMPLETE_TRIES + 1):
            try:
                return self._session.run(lambda conn: complete_many(conn, jobs))
            except sa.exc.DBAPIError as exc:
                log.warning("worker %s: completion failed: %s", self._name, exc.orig)
                time.sleep(RETRY_SECONDS * attempt)
        return None
