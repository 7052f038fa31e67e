"""dms.jobs: a PostgreSQL job queue (no broker) and in-process worker threads.

Enqueue in the caller's transaction, typically a unit of work, so that the job commits or rolls
back with the business data::

    with UnitOfWork(engine, tenant="acme") as uow:
        ...
        jobs.enqueue(uow, "revision.checksum", {"revision_id": str(rid)}, tenant="acme",
                     idempotency_key=f"checksum:{rid}")
        uow.commit()

and work the queue with :class:`Worker`. The state machine, the guarantees and how to run
workers in production are in ``docs/jobs.md``. Defaults and their units are constants of the
modules that use them: :mod:`dms.jobs.enqueue` (``DEFAULT_MAX_ATTEMPTS``, ...),
:mod:`dms.jobs.claims` (``LEASE_SECONDS``), :mod:`dms.jobs.validation` (the caps),
:mod:`dms.jobs.backoff` and :mod:`dms.jobs.worker` (``POLL_SECONDS``, ``GRACE_SECONDS``).

The modules by role: :mod:`~dms.jobs.enqueue`, :mod:`~dms.jobs.claims` and
:mod:`~dms.jobs.pipeline` (claiming), :mod:`~dms.jobs.settlement` (complete, fail, heartbeat,
release), :mod:`~dms.jobs.admin` (dead letter, inspection, housekeeping),
:mod:`~dms.jobs.schedules` (periodic jobs), :mod:`~dms.jobs.limits` (per-tenant limits) and
:mod:`~dms.jobs.presence` (running workers) hold the public functions;
:mod:`~dms.jobs._statements` every SQL statement; :mod:`~dms.jobs.validation` the checks made
before any SQL; :mod:`~dms.jobs._rows` the one way rows become a :class:`Job`. A module whose
name starts with an underscore (``_statements``, ``_rows``, ``_wire``, ``_ids``, ``_failures``,
``_translation``) is internal: its names may change in any release; the rest is the package's
API.
"""

from dms.jobs.admin import (
    cancel,
    cancel_matching,
    count_expired_leases,
    dead_letter,
    get,
    list_jobs,
    prune,
    requeue_dead_letter,
    requeue_dead_letters,
    stats,
)
from dms.jobs.app import App
from dms.jobs.backoff import Backoff
from dms.jobs.claims import dequeue, reclaim_expired
from dms.jobs.enqueue import Enqueued, NewJob, enqueue, enqueue_many
from dms.jobs.limits import Limit, LimitState, list_limits, remove_limit, set_limit
from dms.jobs.model import Job, JobState, PruneResult, QueueStats, StateCount
from dms.jobs.pipeline import claim_batch
from dms.jobs.presence import LiveWorker, live_workers
from dms.jobs.schedules import (
    Schedule,
    ScheduleState,
    Tick,
    list_schedules,
    register_schedules,
    remove_schedule,
    tick_schedules,
)
from dms.jobs.settlement import Completion, complete, complete_many, fail, heartbeat, release
from dms.jobs.worker import AsyncHandler, Handler, Worker, WorkerConfig

__all__ = [
    "App",
    "AsyncHandler",
    "Backoff",
    "Completion",
    "Enqueued",
    "Handler",
    "Job",
    "JobState",
    "Limit",
    "LimitState",
    "LiveWorker",
    "NewJob",
    "PruneResult",
    "QueueStats",
    "Schedule",
    "ScheduleState",
    "StateCount",
    "Tick",
    "Worker",
    "WorkerConfig",
    "cancel",
    "cancel_matching",
    "claim_batch",
    "complete",
    "complete_many",
    "count_expired_leases",
    "dead_letter",
    "dequeue",
    "enqueue",
    "enqueue_many",
    "fail",
    "get",
    "heartbeat",
    "list_jobs",
    "list_limits",
    "list_schedules",
    "live_workers",
    "prune",
    "reclaim_expired",
    "register_schedules",
    "release",
    "remove_limit",
    "remove_schedule",
    "requeue_dead_letter",
    "requeue_dead_letters",
    "set_limit",
    "stats",
    "tick_schedules",
]
