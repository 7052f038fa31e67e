"""The lease renewer (heartbeat): extends the leases of the jobs a worker holds.

Every third of the lease, each held claim that is not being settled gets a fenced
:func:`~dms.jobs.heartbeat`, so long jobs keep their lease and a job claimed ahead keeps its
place. A claim the worker let go (settled, or given up because its outcome could not be
recorded) is renewed no more: its lease expires and another claim takes the job over.

A heartbeat that finds the lease gone reports a reclaim only if the worker still holds the
claim and is not settling it: otherwise the heartbeat merely raced with this worker's own
completion (issue 10, bug 3), which is logged at DEBUG.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from functools import partial

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms.errors import LeaseLost
from dms.jobs.settlement import heartbeat
from dms.jobs.worker._book import Claim, ClaimBook
from dms.jobs.worker._session import HeldSession
from dms.jobs.worker.stats import Tally

log = logging.getLogger(__name__)


class Renewer:
    """Renews the leases of ``book``'s held claims every third of ``lease``."""

    def __init__(
        self,
        engine: Engine,
        *,
        name: str,
        book: ClaimBook,
        tally: Tally,
        lease: timedelta,
        stopping: threading.Event,
    ) -> None:
        """Renew through a connection of ``engine`` held for the purpose (autocommit)."""
        self._session = HeldSession(engine)
        self._name = name
        self._book = book
        self._tally = tally
        self._lease = lease
        self._stopping = stopping

    def run(self) -> None:
        """Renew every third of the lease until the worker stops."""
        interval = self._lease.total_seconds() / 3
        try:
            while not self._stopping.wait(interval):
                self.renew_all()
        finally:
            self._session.close()

    def salvage(self, error: BaseException) -> None:
        """Nothing to settle: the next renewer renews the next round."""

    def renew_all(self) -> None:
        """One round: renew every claim due; a database error ends the round early.

        The lease is three rounds long, so the next round is soon enough.
        """
        for claim in self._book.due():
            if self._stopping.is_set():
                return
            try:
                self._session.run(partial(self._renew, claim))
            except LeaseLost:
                self._lost(claim)
            except sa.exc.DBAPIError as exc:
                log.warning("worker %s: heartbeat failed: %s", self._name, exc.orig)
                return

    def _renew(self, claim: Claim, conn: Connection) -> None:
        heartbeat(conn, claim.job, lease=self._lease)

    def _lost(self, claim: Claim) -> None:
        if self._book.lease_lost(claim):
            self._tally.add("lost")
            log.warning(
                "worker %s: job %s (attempt %d) was reclaimed by another worker",
                self._name,
                claim.job.id,
                claim.job.attempts,
            )
        else:
            log.debug("worker %s: job %s was settled meanwhile", self._name, claim.job.id)
