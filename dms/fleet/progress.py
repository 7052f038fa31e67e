"""How a fleet operation shows its progress: a bar on a terminal, log lines elsewhere.

:func:`progress_for` picks one: on a terminal, a `tqdm <https://tqdm.github.io>`_ bar on stderr
with the count, the rate and the time left; off a terminal (cron, CI, a pipe), a line through
the ``dms.fleet`` logger every :data:`LOG_INTERVAL_SECONDS`, and at the start and end of a large
run. On a terminal a tenant that fails is also shown at once, above the bar; off it, the
report at the end lists every one.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Protocol, TextIO

from tqdm import tqdm

from dms.fleet.report import Outcome, TenantReport

#: Off a terminal, at most one progress line per this many seconds.
LOG_INTERVAL_SECONDS = 5.0
#: Off a terminal, runs over at least this many tenants also log their start and end.
LOG_FROM_TENANTS = 100

_log = logging.getLogger("dms.fleet")


class Progress(Protocol):
    """Told how many tenants there are, then about each one as it ends."""

    def begin(self, total: int) -> None:
        """``total`` tenants are about to be worked on."""

    def advance(self, report: TenantReport | None = None, *, steps: int = 1) -> None:
        """``steps`` more tenants ended (``report``: how the one tenant ended, if known)."""

    def end(self) -> None:
        """The operation is over (finished or stopped)."""


class NoProgress:
    """Shows nothing: for library calls that did not ask for progress."""

    def begin(self, total: int) -> None:
        """Nothing to show."""

    def advance(self, report: TenantReport | None = None, *, steps: int = 1) -> None:
        """Nothing to show."""

    def end(self) -> None:
        """Nothing to show."""


def _announce(report: TenantReport | None) -> str | None:
    """The line that a finished tenant deserves on its own, if any."""
    if report is None or report.outcome not in (Outcome.FAILED, Outcome.EXISTS, Outcome.INVALID):
        return None
    return report.describe()


class BarProgress:
    """A terminal progress bar (tqdm) on ``stream``: count, percentage, rate, time left."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        """Label the bar with the operation (``migrate``, ``create``, ...)."""
        self._label = label
        self._stream = stream or sys.stderr
        self._bar: tqdm[Any] | None = None

    def begin(self, total: int) -> None:
        """Draw the bar at 0 of ``total``."""
        self._bar = tqdm(
            total=total,
            desc=self._label,
            unit=" tenants",
            file=self._stream,
            dynamic_ncols=True,
            mininterval=0.2,
            smoothing=0.05,
        )

    def advance(self, report: TenantReport | None = None, *, steps: int = 1) -> None:
        """Move the bar on; print a failed tenant's line above it."""
        if self._bar is None:
            return
        line = _announce(report)
        if line is not None:
            self._bar.write(line, file=self._stream)
        if steps:
            self._bar.update(steps)

    def end(self) -> None:
        """Leave the bar's last state on screen."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class LogProgress:
    """Plain log lines through the ``dms.fleet`` logger: for logs, pipes and CI."""

    def __init__(self, label: str, interval: float = LOG_INTERVAL_SECONDS) -> None:
        """Label the lines with the operation; one line per ``interval`` seconds at most."""
        self._label = label
        self._interval = interval
        self._total = 0
        self._done = 0
        self._started = 0.0
        self._last = 0.0

    def begin(self, total: int) -> None:
        """Remember the total and the start time; say what is about to happen."""
        self._total, self._done = total, 0
        self._started = self._last = time.monotonic()
        if total >= LOG_FROM_TENANTS:
            _log.info("%s: %d tenant(s)", self._label, total)

    def advance(self, report: TenantReport | None = None, *, steps: int = 1) -> None:
        """Count tenants; log the progress every interval."""
        self._done += steps
        now = time.monotonic()
        if now - self._last >= self._interval and self._done < self._total:
            self._last = now
            _log.info("%s", self._line(now))

    def end(self) -> None:
        """Log where the operation ended (large or long runs)."""
        now = time.monotonic()
        if self._total >= LOG_FROM_TENANTS or now - self._started >= self._interval:
            _log.info("%s", self._line(now))

    def _line(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        rate = self._done / elapsed
        left = (self._total - self._done) / rate if rate > 0 else float("inf")
        percent = 100 * self._done // max(self._total, 1)
        return (
            f"{self._label}: {self._done}/{self._total} tenants ({percent}%), "
            f"{rate:.1f}/s, {_duration(elapsed)} elapsed, {_duration(left)} left"
        )


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def progress_for(label: str, stream: TextIO | None = None) -> Progress:
    """A bar if ``stream`` (default stderr) is a terminal, else log lines."""
    stream = stream or sys.stderr
    return BarProgress(label, stream) if stream.isatty() else LogProgress(label)
