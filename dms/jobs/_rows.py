"""Rows of ``processing_jobs`` as :class:`~dms.jobs.model.Job` values: one way to build a job.

A row read with every column (:func:`job_of_row`) and a row of a claim's document
(:func:`claimed_jobs`) both become a job through :func:`build_job`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy.engine import Row

from dms.jobs import _wire as wire
from dms.jobs.backoff import Backoff
from dms.jobs.model import Job, JobState


class Claimed(NamedTuple):
    """What a claim's document says: the jobs claimed, and what it saw of limits.

    ``limited``: the claim walked a tenant with limits (:mod:`dms.jobs.limits`), so it may
    have taken fewer jobs than it could because of them, not because the queue ran dry.
    ``limits``: some tenant has limits, so the next claim is to take their locks and keep them.
    """

    jobs: list[Job]
    limited: bool
    limits: bool


def claimed_jobs(document: str | None, worker_id: str) -> list[Job]:
    """The jobs of a claim's document (:func:`claim_document`), in queue order."""
    return read_claim(document, worker_id).jobs


def read_claim(document: str | None, worker_id: str) -> Claimed:
    """A claim's document (:func:`claim_document`): its jobs in queue order, and the flag."""
    if document is None:
        return Claimed([], limited=False, limits=False)
    started, lease_end, rows, limited, limits = wire.decode(document)
    timestamps = wire.Timestamps()
    started_at, lease_expires_at = timestamps(started), timestamps(lease_end)
    claimed = [
        _claimed_job(row, worker_id, started_at, lease_expires_at, timestamps) for row in rows or ()
    ]
    # UPDATE ... RETURNING returns rows in no particular order; callers run them in queue order.
    # PostgreSQL orders UUIDs by their bytes, that is by their integer value (compared in C,
    # unlike UUID objects).
    jobs = sorted(claimed, key=lambda job: (job.priority, job.run_at, job.id.int))
    return Claimed(jobs, limited=bool(limited), limits=bool(limits))


def _claimed_job(
    row: list[Any],
    worker_id: str,
    started_at: datetime,
    lease_expires_at: datetime,
    timestamps: wire.Timestamps,
) -> Job:
    """The :class:`Job` of a row of :func:`claim_document`, as claimed by ``worker_id``."""
    (  # in the order of CLAIMED_COLUMNS
        job_id,
        tenant,
        kind,
        payload,
        priority,
        attempts,
        max_attempts,
        run_at,
        last_error,
        errors,
        backoff,
        idempotency_key,
        created_at,
    ) = row
    return build_job(
        {
            "id": wire.job_id(job_id),
            "tenant": tenant,
            "kind": kind,
            "payload": payload,
            "priority": priority,
            "state": _RUNNING,
            "attempts": attempts,
            "max_attempts": max_attempts,
            "run_at": timestamps(run_at),
            "locked_by": worker_id,
            "lease_expires_at": lease_expires_at,
            "last_error": last_error,
            "errors": tuple(errors),
            "backoff": None if backoff is None else Backoff.from_json(backoff),
            "idempotency_key": idempotency_key,
            "created_at": timestamps(created_at),
            "started_at": started_at,
            "finished_at": None,
        }
    )


#: Looked up once: an Enum member's attribute access runs Python code (``enum.property``).
_RUNNING = JobState.RUNNING


def build_job(fields: dict[str, Any]) -> Job:
    """The :class:`Job` of all its fields, for the hot path.

    A frozen dataclass's ``__init__`` sets each of the 18 fields with ``object.__setattr__``:
    3.9 µs per job, a sixth of the Python time a worker spent on a no-op job (bench/README.md).
    Taking ``fields`` as the instance's ``__dict__`` costs nearly nothing and builds an equal
    object (a test compares them); the values come from a row whose types the table's columns
    fix.
    """
    job: Job = object.__new__(Job)
    object.__setattr__(job, "__dict__", fields)
    return job


def job_of_row(row: Row[Any]) -> Job:
    """The :class:`Job` of a row read with every column of ``processing_jobs``."""
    values = row._mapping
    return build_job(
        {
            "id": values["id"],
            "tenant": values["tenant"],
            "kind": values["kind"],
            "payload": values["payload"],
            "priority": values["priority"],
            "state": JobState(values["state"]),
            "attempts": values["attempts"],
            "max_attempts": values["max_attempts"],
            "run_at": values["run_at"],
            "locked_by": values["locked_by"],
            "lease_expires_at": values["lease_expires_at"],
            "last_error": values["last_error"],
            "errors": tuple(values["errors"]),
            "backoff": Backoff.from_json(values["backoff"]),
            "idempotency_key": values["idempotency_key"],
            "created_at": values["created_at"],
            "started_at": values["started_at"],
            "finished_at": values["finished_at"],
        }
    )
