"""Arithmetic backoff: how long a failed job waits before its next attempt.

The n-th failure of a job waits ``initial + step * (n - 1)``, capped at ``maximum``::

    failure      1     2     3     4    ...   n
    waits (s)   10    40    70   100   ...   min(10 + 30 (n - 1), 3600)

with the defaults of :data:`DEFAULT_BACKOFF`. Linear rather than exponential growth on purpose:
a document-processing job fails mostly for reasons that last minutes (a storage hiccup, a
deploy), and exponential waits would leave it idle for hours after the cause is gone; the cap
keeps a long-failing job from retrying more often than once an hour either way.

A policy can be set per job (``enqueue(..., backoff=...)``, stored with the job) and per kind
(``WorkerConfig(backoff={"kind": ...})`` or ``fail(..., backoff=...)``); the job's own wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dms.domain.validation import shown
from dms.errors import ValidationError

#: Seconds before the first retry, by default.
DEFAULT_INITIAL_SECONDS = 10.0
#: Seconds added for each further failure, by default.
DEFAULT_STEP_SECONDS = 30.0
#: Longest wait between two attempts, by default: one hour.
DEFAULT_MAXIMUM_SECONDS = 3600.0
#: Largest value of any of a policy's seconds: a year. Beyond it a wait means "never", which
#: is what the dead letter is for, and ``now() + wait`` must stay a timestamp PostgreSQL can
#: store (``Backoff(initial_seconds=1e15)`` used to overflow in the worker).
MAX_BACKOFF_SECONDS = 365 * 24 * 3600.0


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Wait ``initial + step * (n - 1)`` seconds after the n-th failure, at most ``maximum``."""

    initial_seconds: float = DEFAULT_INITIAL_SECONDS
    step_seconds: float = DEFAULT_STEP_SECONDS
    maximum_seconds: float = DEFAULT_MAXIMUM_SECONDS

    def __post_init__(self) -> None:
        """Reject policies that would schedule a retry in the past or never."""
        values = (self.initial_seconds, self.step_seconds, self.maximum_seconds)
        if not all(_valid_seconds(v) for v in values):
            raise ValidationError(
                f"backoff seconds must be numbers from 0 to {MAX_BACKOFF_SECONDS:.0f}, "
                f"not {shown(values)}"
            )
        if self.maximum_seconds < self.initial_seconds:
            raise ValidationError(
                f"backoff maximum ({self.maximum_seconds}s) is below its initial wait "
                f"({self.initial_seconds}s)"
            )

    def delay(self, failure: int) -> timedelta:
        """The wait after the ``failure``-th failure (1 for the first)."""
        if isinstance(failure, bool) or not isinstance(failure, int) or failure < 1:
            raise ValidationError(f"failures are counted from 1, not {shown(failure)}")
        seconds = self.initial_seconds + self.step_seconds * (failure - 1)
        return timedelta(seconds=min(seconds, self.maximum_seconds))

    def to_json(self) -> dict[str, float]:
        """The policy as stored in a job's ``backoff`` column."""
        return {
            "initial_seconds": self.initial_seconds,
            "step_seconds": self.step_seconds,
            "maximum_seconds": self.maximum_seconds,
        }

    @classmethod
    def from_json(cls, value: Any) -> Backoff | None:
        """Read a policy stored by :meth:`to_json`; ``None`` when the job has none.

        Values beyond :data:`MAX_BACKOFF_SECONDS` (stored before that cap existed) are read
        as the cap: a job must stay claimable and retryable whatever its row holds.
        """
        if value is None:
            return None
        return cls(
            initial_seconds=_capped(value["initial_seconds"]),
            step_seconds=_capped(value["step_seconds"]),
            maximum_seconds=_capped(value["maximum_seconds"]),
        )


def _capped(seconds: Any) -> float:
    return min(max(float(seconds), 0.0), MAX_BACKOFF_SECONDS)


def _valid_seconds(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    # False for NaN and infinities too; no float() of a huge int, which would overflow.
    return 0 <= value <= MAX_BACKOFF_SECONDS


#: The policy of jobs and kinds that set none.
DEFAULT_BACKOFF = Backoff()
