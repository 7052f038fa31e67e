"""The wake-up listener: LISTEN for enqueued jobs and wake the claimers at once.

``LISTEN`` runs on a dedicated autocommit connection (behind PgBouncer in transaction mode,
pass ``listen=False`` or a direct ``listen_url``); polling every ``poll_seconds`` keeps the
worker working without it. A lost LISTEN connection is opened again after a poll interval,
and the claimers are woken then, since jobs enqueued meanwhile notified no one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, Engine

from dms.jobs._statements import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

#: Seconds a LISTEN waits for notifications before checking for a stop.
LISTEN_CHECK_SECONDS = 1.0


class Wakeup:
    """A generation counter that claimers wait on: each notification starts a new generation."""

    def __init__(self, stopping: threading.Event) -> None:
        """Wake-ups that also end when ``stopping`` is set."""
        self._stopping = stopping
        self._condition = threading.Condition()
        self.generation = 0
        # Set by the claimers: whether their last claim saw that some tenant has limits.
        self.limited = False

    def wake_if_limited(self) -> None:
        """A job of this worker was recorded finished: wake the claimers if limits held them.

        A limited tenant's finished job is room under its limit that no notification
        announces; without this, a claimer held back by a limit would wait for its next poll
        (a tenant limited to 3 running jobs of 1 ms drained 71 jobs/s, measured, not 2,000).
        """
        if self.limited:
            self.wake()

    def wake(self) -> None:
        """Wake every waiting claimer.

        Every claimer, also for a single job: they race, and the first to get the GIL and the
        server wins. Waking only one raised the p99 enqueue-to-start latency from 4.3 to 5.6 ms
        in alternating runs (bench/README.md).
        """
        with self._condition:
            self.generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        """Sleep until a generation newer than ``seen``, a stop, or ``timeout`` seconds."""
        with self._condition:
            self._condition.wait_for(
                lambda: self.generation != seen or self._stopping.is_set(), timeout=timeout
            )


class Listener:
    """LISTENs on :data:`~dms.jobs._statements.NOTIFY_CHANNEL` and wakes the claimers."""

    def __init__(
        self,
        url: str,
        *,
        name: str,
        wakeup: Wakeup,
        stopping: threading.Event,
        poll_seconds: float,
    ) -> None:
        """Listen on the server of ``url`` (a libpq URL)."""
        self._url = url
        self._name = name
        self._wakeup = wakeup
        self._stopping = stopping
        self._poll_seconds = poll_seconds

    def run(self) -> None:
        """Listen until the worker stops, reconnecting after a poll interval on errors."""
        while not self._stopping.is_set():
            try:
                with _listening(self._url) as notifications:
                    self._wakeup.wake()  # jobs enqueued while we were not listening
                    for _ in notifications(self._stopping):
                        self._wakeup.wake()
            except psycopg.Error as exc:
                log.warning(
                    "worker %s: LISTEN connection failed (%s); polling meanwhile", self._name, exc
                )
                self._stopping.wait(self._poll_seconds)

    def salvage(self, error: BaseException) -> None:
        """Nothing held: the claimers poll until the next listener listens."""


def listen_url(engine: Engine, url: str | URL | None) -> str:
    """The libpq URL to LISTEN on: ``url``, or the engine's."""
    chosen = sa.make_url(url) if url is not None else engine.url
    return chosen.set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _listening(url: str) -> Iterator[Callable[[threading.Event], Iterator[psycopg.Notify]]]:
    """A dedicated autocommit connection that LISTENs on :data:`NOTIFY_CHANNEL`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))

        def notifications(stopping: threading.Event) -> Iterator[psycopg.Notify]:
            while not stopping.is_set():
                yield from conn.notifies(timeout=LISTEN_CHECK_SECONDS)

        yield notifications
