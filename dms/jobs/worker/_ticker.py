"""The ticker: a worker's once-a-second duties, the schedules' ticks and its own presence.

Every running worker ticks the periodic jobs (:mod:`dms.jobs.schedules`) about once a second,
each pass in a transaction of its own on a held connection; passes of several workers take
different schedules (row locks, SKIP LOCKED), so a tick is enqueued once however many workers
run, and a worker that dies mid-pass leaves the tick to the next pass of any worker. Every
:data:`~dms.jobs.presence.ANNOUNCE_SECONDS` (and first of all) it also announces the worker and
its kinds (:mod:`dms.jobs.presence`). After the ticks, each pass runs the worker's own duties
(:meth:`dms.jobs.Worker.on_tick`, nothing for a plain worker) in a transaction of their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms.jobs.presence import ANNOUNCE_SECONDS, announce
from dms.jobs.schedules import Tick, tick_schedules
from dms.jobs.worker._session import HeldSession

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Seconds between two passes of a worker's ticker: a tick (a minute at the finest) is enqueued
#: within a second of its time.
TICK_SECONDS = 1.0


class Ticker:
    """Ticks the schedules every :data:`TICK_SECONDS` and announces the worker, until it stops."""

    def __init__(
        self,
        engine: Engine,
        *,
        name: str,
        kinds: Collection[str],
        stopping: threading.Event,
        duties: Callable[[Connection], None] | None = None,
    ) -> None:
        """Tick and announce worker ``name`` (of ``kinds``) through a held connection.

        ``duties``: run after each pass's ticks, in a transaction of their own.
        """
        self._session = HeldSession(engine, autocommit=False)
        self._duties = duties
        self._name = name
        self._kinds = tuple(kinds)
        self._stopping = stopping
        self._announced: float | None = None

    def run(self) -> None:
        """Announce, then tick until the worker stops; a database error waits for the next pass."""
        try:
            self.announce_if_due()
            while not self._stopping.wait(TICK_SECONDS):
                self.tick_once()
                self.run_duties()
                self.announce_if_due()
        finally:
            self._session.close()

    def salvage(self, error: BaseException) -> None:
        """Nothing to settle: a pass that failed rolled back, and the next one retries it."""

    def tick_once(self) -> list[Tick]:
        """One pass, committed; what it enqueued (nothing after a database error)."""
        try:
            ticks = self._session.run(_in_transaction(tick_schedules))
        except sa.exc.DBAPIError as exc:
            log.warning("worker %s: ticking the schedules failed (%s)", self._name, exc.orig)
            return []
        for tick in ticks:
            log.debug(
                "worker %s: schedule %s enqueued %d job(s)", self._name, tick.name, len(tick.ticks)
            )
        return ticks

    def run_duties(self) -> None:
        """The worker's own duties, committed; a database error waits for the next pass."""
        if self._duties is None:
            return
        try:
            self._session.run(_in_transaction(self._duties))
        except sa.exc.DBAPIError as exc:
            log.warning("worker %s: its periodic duties failed (%s)", self._name, exc.orig)

    def announce_if_due(self) -> None:
        """Announce the worker if it never did, or did :data:`ANNOUNCE_SECONDS` ago."""
        now = time.monotonic()
        if self._announced is not None and now - self._announced < ANNOUNCE_SECONDS:
            return
        try:
            self._session.run(_in_transaction(lambda conn: announce(conn, self._name, self._kinds)))
        except sa.exc.DBAPIError as exc:
            log.warning("worker %s: announcing itself failed (%s)", self._name, exc.orig)
            return
        self._announced = now


def _in_transaction(work: Callable[[Connection], _T]) -> Callable[[Connection], _T]:
    """``work`` in a transaction of its own, committed when it returns."""

    def run(conn: Connection) -> _T:
        with conn.begin():
            return work(conn)

    return run
