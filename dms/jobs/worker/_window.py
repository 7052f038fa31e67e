"""The claim window: how many jobs a worker claims ahead of its runners (Little's law).

A claim takes a round trip to PostgreSQL: a few milliseconds, more while the worker's threads
compete for the GIL. For the runners never to wait for it, the jobs claimed ahead of them must
last that long: the pace at which jobs finish, times the round trip. Fast jobs thus get large
claims (one statement for hundreds of jobs, which is what lets no-op jobs run at tens of
thousands per second: bench/README.md), and slow jobs about one job ahead per runner, because
a job claimed ahead waits for a runner of this worker while another worker may be idle.
"""

from __future__ import annotations

import math

#: Round trips of a claim that the jobs claimed ahead should last: a claim starts only once
#: half the window is free, and a worker's claims overlap.
ROUND_TRIPS_AHEAD = 4
#: Shortest interval over which the pace of finished jobs is measured, in seconds.
PACE_SECONDS = 0.01
#: Weight of a new measurement in the smoothed pace and round trip.
_SMOOTHING = 0.5


class Window:
    """Jobs to claim ahead of the runners, between ``floor`` and ``ceiling``.

    Fed with the worker's count of finished jobs (:meth:`finished`) and the duration of its
    claims (:meth:`round_trip`); not thread-safe (the worker calls it under its lock).
    """

    def __init__(self, *, floor: int, ceiling: int, now: float) -> None:
        """Start at ``floor``: nothing is known of the pace yet."""
        self._floor = min(floor, ceiling)
        self._ceiling = ceiling
        self._pace = 0.0  # finished jobs per second, smoothed
        self._round_trip = 0.0  # seconds of a claim, smoothed
        self._counted = 0
        self._since = now
        self.ahead = self._floor

    def finished(self, count: int, now: float) -> None:
        """Note that ``count`` jobs have finished since the worker started, as of ``now``."""
        elapsed = now - self._since
        if elapsed < PACE_SECONDS:
            return
        pace = (count - self._counted) / elapsed
        # Up at once, down smoothly: while the window is too small the pace is the window's
        # (the runners finish what was claimed, then wait), so it grows fourfold per measure.
        self._pace = max(pace, self._pace + _SMOOTHING * (pace - self._pace))
        self._counted, self._since = count, now
        self._resize()

    def round_trip(self, seconds: float) -> None:
        """Note that a claim took ``seconds``."""
        self._round_trip += _SMOOTHING * (seconds - self._round_trip)
        self._resize()

    def _resize(self) -> None:
        wanted = math.ceil(self._pace * self._round_trip * ROUND_TRIPS_AHEAD)
        self.ahead = max(self._floor, min(self._ceiling, wanted))


def capacity(runners: int, ahead: int) -> int:
    """Unsettled jobs a worker holds at most: one per runner plus those claimed ahead."""
    return runners + ahead


def room_left(*, capacity: int, held: int, claiming: int, acking: int) -> int:
    """Jobs that may be claimed now.

    ``held``: claimed and not settled; ``claiming``: room reserved by claims under way;
    ``acking``: of the held, those whose handler returned and that only wait for the batch
    completer. Those need no runner, so they do not count against the capacity: the next claim
    overlaps the completion of earlier ones instead of waiting for their commit. At most a
    capacity's worth of them is allowed on top.
    """
    reserved = held + claiming
    return min(capacity - (reserved - acking), 2 * capacity - reserved)


def claim_size(*, capacity: int, batch_size: int) -> int:
    """Room a claim waits for: half the capacity (claims come in batches), at most a batch."""
    return max(1, min(batch_size, capacity // 2))
