"""The ticker: enqueues the due ticks of periodic jobs (:mod:`dms.jobs.schedules`).

Every running worker ticks, about once a second, each pass in a transaction of its own on a
held connection; passes of several workers take different schedules (row locks, SKIP LOCKED),
so a tick is enqueued once however many workers run, and a worker that dies mid-pass leaves
the tick to the next pass of any worker.
"""

from __future__ import annotations

import logging
import threading

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms.jobs.schedules import Tick, tick_schedules
from dms.jobs.worker.session import HeldSession

log = logging.getLogger(__name__)

#: Seconds between two passes of a worker's ticker: cron's finest field is the second.
TICK_SECONDS = 1.0


class Ticker:
    """Runs :func:`~dms.jobs.tick_schedules` every :data:`TICK_SECONDS` until the worker stops."""

    def __init__(self, engine: Engine, *, name: str, stopping: threading.Event) -> None:
        """Tick through a connection of ``engine`` held for the purpose."""
        self._session = HeldSession(engine, autocommit=False)
        self._name = name
        self._stopping = stopping

    def run(self) -> None:
        """Tick until the worker stops; a database error waits for the next pass."""
        try:
            while not self._stopping.wait(TICK_SECONDS):
                self.tick_once()
        finally:
            self._session.close()

    def salvage(self, error: BaseException) -> None:
        """Nothing to settle: a pass that failed rolled back, and the next one retries it."""

    def tick_once(self) -> list[Tick]:
        """One pass, committed; what it enqueued (nothing after a database error)."""
        try:
            ticks = self._session.run(_pass)
        except sa.exc.DBAPIError as exc:
            log.warning("worker %s: ticking the schedules failed (%s)", self._name, exc.orig)
            return []
        for tick in ticks:
            log.debug(
                "worker %s: schedule %s enqueued %d job(s)", self._name, tick.name, len(tick.ticks)
            )
        return ticks


def _pass(conn: Connection) -> list[Tick]:
    with conn.begin():
        return tick_schedules(conn)
