"""What a worker counts about itself: runners alive and replaced, parts restarted, outcomes.

Read with :meth:`dms.jobs.Worker.stats`; exported by :mod:`dms.metrics` (``dms worker
--metrics-port``). A worker whose ``runners_alive`` is below its ``runners``, or whose
``runners_replaced`` or ``parts_restarted`` grows, has met a fault it survived: its log holds
the tracebacks.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class WorkerStats:
    """A snapshot of a worker's counters; all counts are since :meth:`~dms.jobs.Worker.start`."""

    runners: int
    """Runner threads the worker is configured with (one event loop for ``async def``
    handlers, which runs ``concurrency`` jobs at once)."""
    runners_alive: int
    """Runner threads alive now; below ``runners`` only while one is being replaced."""
    runners_replaced: int
    """Runners that failed unexpectedly and were replaced."""
    parts_restarted: int
    """Other parts (claimer, completer, renewer, listener) that failed and were restarted."""
    held: int
    """Jobs claimed and not yet settled."""
    completed: int
    """Jobs this worker completed."""
    failed: int
    """Failed attempts this worker recorded."""
    released: int
    """Jobs this worker released (given back without an attempt counted): at a stop, after a
    dropped connection, or swept (claimed or abandoned, then found running under its name)."""
    lost: int
    """Jobs whose lease this worker found lost (another worker reclaimed them)."""
    abandoned: int
    """Jobs whose outcome could not be recorded: released by the next sweep, or, if the
    database stays out of reach, left to lease expiry and a reclaim."""


class Tally:
    """Thread-safe counters behind :class:`WorkerStats`."""

    def __init__(self, runners: int) -> None:
        """Counters of a worker with ``runners`` runner threads, all at zero."""
        self.runners = runners
        """The runner threads."""
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, count: int = 1) -> None:
        """Add ``count`` to the counter ``name`` (a field of :class:`WorkerStats`)."""
        with self._lock:
            self._counts[name] += count

    def snapshot(self, *, held: int) -> WorkerStats:
        """The counters now, with ``held`` claims."""
        with self._lock:
            counts = dict(self._counts)
        return WorkerStats(
            runners=self.runners,
            runners_alive=counts.get("runners_alive", 0),
            runners_replaced=counts.get("runners_replaced", 0),
            parts_restarted=counts.get("parts_restarted", 0),
            held=held,
            completed=counts.get("completed", 0),
            failed=counts.get("failed", 0),
            released=counts.get("released", 0),
            lost=counts.get("lost", 0),
            abandoned=counts.get("abandoned", 0),
        )
