"""What a job is, as the queue hands it out: plain values, no SQLAlchemy.

The states and their transitions (drawn in ``docs/jobs.md``)::

    queued ──claim──▶ running ──complete──▶ done
      ▲                 │ │
      └──fail (retry)───┘ └──fail (last attempt)──▶ dead ──requeue──▶ queued
      └──release / lease expired and reclaimed (running again)

    queued, running, dead ──cancel──▶ cancelled
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dms.jobs.backoff import Backoff


class JobState(str, enum.Enum):
    """Where a job is in its life."""

    QUEUED = "queued"
    """Waiting for ``run_at``, then for a worker."""
    RUNNING = "running"
    """Claimed by a worker that holds a lease until ``lease_expires_at``."""
    DONE = "done"
    """Completed; terminal."""
    DEAD = "dead"
    """Failed ``max_attempts`` times (or cannot run at all); waits for a manual requeue."""
    CANCELLED = "cancelled"
    """Cancelled by an operator (:func:`~dms.jobs.cancel`); terminal. A running attempt's
    settlement is fenced off: it changes nothing and its unit of work rolls back."""


#: States a job can be cancelled from: every state but the terminal ``done`` and ``cancelled``.
CANCELLABLE_STATES = (JobState.QUEUED.value, JobState.RUNNING.value, JobState.DEAD.value)


@dataclass(frozen=True, kw_only=True)
class Job:
    """A row of ``dms.processing_jobs``.

    ``attempts`` counts claims: it is 1 while the first attempt runs. Together with ``id`` and
    ``locked_by`` it is the fence that :func:`~dms.jobs.complete` and friends check.
    """

    id: uuid.UUID
    tenant: str
    kind: str
    payload: Any
    priority: int
    state: JobState
    attempts: int
    max_attempts: int
    run_at: datetime
    locked_by: str | None
    lease_expires_at: datetime | None
    last_error: str | None
    errors: tuple[dict[str, Any], ...]
    backoff: Backoff | None
    idempotency_key: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class StateCount:
    """How many jobs of one tenant and kind are in one state."""

    tenant: str
    kind: str
    state: JobState
    count: int


@dataclass(frozen=True, kw_only=True)
class QueueStats:
    """Health of the queue: counts by tenant, kind and state, and the oldest runnable job's age."""

    counts: tuple[StateCount, ...]
    oldest_queued_age: timedelta | None
    """How long the longest-waiting runnable job has waited past its ``run_at``."""

    def total(self, state: JobState | None = None) -> int:
        """All jobs, or all jobs in ``state``."""
        return sum(c.count for c in self.counts if state is None or c.state is state)

    @property
    def dead(self) -> int:
        """Jobs in the dead letter."""
        return self.total(JobState.DEAD)


@dataclass(frozen=True, kw_only=True)
class PruneResult:
    """What :func:`~dms.jobs.prune` deleted."""

    jobs: int
    idempotency_keys: int
