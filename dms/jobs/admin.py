"""Operating the queue: the dead letter, single jobs, counts, housekeeping."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import timedelta

from dms import tenancy
from dms.domain.validation import check_flag, shown
from dms.driver_errors import refused
from dms.errors import JobFinished, NotFound, ValidationError
from dms.jobs._rows import job_of_row
from dms.jobs._statements import (
    cancel_matching_statement,
    cancel_statement,
    dead_letter_statement,
    expired_leases_statement,
    get_statement,
    list_statement,
    oldest_queued_statement,
    prune_jobs_statement,
    prune_keys_statement,
    requeue_matching_statement,
    requeue_statement,
    state_counts_statement,
    unfinished_filter,
)
from dms.jobs._translation import STATE_UNKNOWN
from dms.jobs.executor import Executor, connection_of
from dms.jobs.model import (
    CANCELLABLE_STATES,
    Job,
    JobState,
    PruneResult,
    QueueStats,
    StateCount,
)
from dms.jobs.validation import (
    MAX_AGE,
    require_duration,
    require_int,
    require_job_id,
    require_optional_name,
)

#: Finished jobs younger than this survive :func:`prune` by default.
JOB_RETENTION_DAYS = 7


def _require_filters(kind: object, tenant: object, older_than: object) -> None:
    """Filters of the dead letter and of counts: ``None`` (any) or a valid value."""
    require_optional_name("kind", kind)
    if tenant is not None:
        tenancy.validate_slug(tenant)
    if older_than is not None:
        require_duration("older_than", older_than, maximum=MAX_AGE, zero=True)


def requeue_dead_letter(target: Executor, job_id: uuid.UUID) -> Job:
    """Put dead job ``job_id`` back to ``queued`` with attempts reset; its error history stays.

    Raises :class:`~dms.errors.NotFound` if there is no such job in the dead letter.
    """
    require_job_id(job_id)
    row = connection_of(target).execute(requeue_statement(), {"job_id": job_id}).one_or_none()
    if row is None:
        raise NotFound(f"job {job_id} is not in the dead letter")
    return job_of_row(row)


def requeue_dead_letters(
    target: Executor,
    *,
    kind: str | None = None,
    tenant: str | None = None,
    older_than: timedelta | None = None,
) -> list[Job]:
    """Requeue every dead job matching all given filters (none: all); return the requeued jobs.

    ``older_than``: only jobs that died at least that long ago.
    """
    _require_filters(kind, tenant, older_than)
    statement = requeue_matching_statement(kind, tenant, older_than)
    return [job_of_row(row) for row in connection_of(target).execute(statement)]


def dead_letter(
    target: Executor,
    *,
    kind: str | None = None,
    tenant: str | None = None,
    older_than: timedelta | None = None,
    limit: int = 100,
) -> list[Job]:
    """Dead jobs matching all given filters, the most recently dead first."""
    _require_filters(kind, tenant, older_than)
    require_int("limit", limit, minimum=1)
    statement = dead_letter_statement(kind, tenant, older_than, limit)
    return [job_of_row(row) for row in connection_of(target).execute(statement)]


def get(target: Executor, job_id: uuid.UUID) -> Job:
    """The job ``job_id``; :class:`~dms.errors.NotFound` if it does not exist (or was pruned)."""
    require_job_id(job_id)
    row = connection_of(target).execute(get_statement(), {"job_id": job_id}).one_or_none()
    if row is None:
        raise NotFound(f"job {job_id} does not exist")
    return job_of_row(row)


def stats(target: Executor, *, tenant: str | None = None, kind: str | None = None) -> QueueStats:
    """Counts by tenant, kind and state, and the wait of the oldest runnable queued job."""
    _require_filters(kind, tenant, None)
    conn = connection_of(target)
    counts = conn.execute(state_counts_statement(tenant, kind))
    oldest = conn.scalar(oldest_queued_statement(tenant, kind))
    return QueueStats(
        counts=tuple(
            StateCount(tenant=t, kind=k, state=JobState(s), count=n) for t, k, s, n in counts
        ),
        oldest_queued_age=oldest,
    )


def count_expired_leases(target: Executor, *, older_than: timedelta = timedelta(0)) -> int:
    """Running jobs whose lease expired over ``older_than`` ago and that no worker took back.

    Workers take expired leases back within a quarter lease: a count above zero for longer
    than that means no worker of those kinds is running (``dms healthcheck``).
    """
    require_duration("older_than", older_than, maximum=MAX_AGE, zero=True)
    statement = expired_leases_statement()
    return int(connection_of(target).scalar(statement, {"older_than": older_than}) or 0)


def prune(
    target: Executor,
    *,
    older_than: timedelta = timedelta(days=JOB_RETENTION_DAYS),
    include_dead: bool = False,
) -> PruneResult:
    """Delete old finished jobs and expired idempotency keys; return how many of each went.

    Jobs: ``done`` and ``cancelled`` (and ``dead`` with ``include_dead``) that finished over
    ``older_than`` ago.
    Keys: those past the retention given when they were enqueued.
    """
    require_duration("older_than", older_than, maximum=MAX_AGE, zero=True)
    check_flag("include_dead", include_dead)
    conn = connection_of(target)
    pruned_jobs = conn.execute(
        prune_jobs_statement(include_dead=include_dead), {"older_than": older_than}
    ).rowcount
    pruned_keys = conn.execute(prune_keys_statement()).rowcount
    return PruneResult(jobs=pruned_jobs, idempotency_keys=pruned_keys)


def cancel(target: Executor, job_id: uuid.UUID) -> Job:
    """Cancel job ``job_id`` for good; return it, ``cancelled``.

    * ``queued`` or ``dead``: it will never run (again);
    * ``running``: its handler is not interrupted, but its attempt can no longer settle: the
      worker's complete, fail and heartbeat are fenced on ``state = 'running'``, so they
      change nothing and raise :class:`~dms.errors.LeaseLost`, and whatever the handler wrote
      in its unit of work rolls back with it. Effects outside the database (a file written, a
      mail sent) cannot be undone by the queue;
    * already ``cancelled``: returned as it is (cancelling twice is not an error);
    * ``done``: :class:`~dms.errors.JobFinished`, nothing changes.

    Raises :class:`~dms.errors.NotFound` if there is no such job (or it was pruned), and
    :class:`~dms.errors.NotMigrated` if the queue's table predates ``cancelled`` (the
    caller's transaction is then aborted). The job's
    idempotency key stays in the ledger: enqueueing with it again returns the cancelled job.
    """
    require_job_id(job_id)
    conn = connection_of(target)
    with refused(STATE_UNKNOWN):
        row = conn.execute(cancel_statement(), {"job_id": job_id}).one_or_none()
    if row is not None:
        return job_of_row(row)
    job = get(conn, job_id)  # NotFound if there is no such job
    if job.state is JobState.CANCELLED:
        return job
    raise JobFinished(f"job {job_id} is {job.state.value}: only unfinished jobs can be cancelled")


def cancel_matching(
    target: Executor,
    *,
    tenant: str | None = None,
    kind: str | None = None,
    states: Iterable[JobState | str] | None = None,
    older_than: timedelta | None = None,
) -> list[Job]:
    """Cancel every unfinished job matching all given filters; return the cancelled jobs.

    ``states``: some of ``queued``, ``running`` and ``dead`` (default: all three; ``done`` and
    ``cancelled`` jobs are finished and never match). ``older_than``: only jobs created at
    least that long ago. Each job is cancelled as :func:`cancel` cancels one (a running
    attempt can no longer settle). At least one filter must be given: cancelling every
    unfinished job of every tenant is not something to ask for by leaving filters out.
    """
    _require_filters(kind, tenant, older_than)
    wanted = _cancellable_states(states)
    if (tenant, kind, states, older_than) == (None, None, None, None):
        raise ValidationError("give at least one filter: tenant, kind, states or older_than")
    matching = unfinished_filter(wanted, kind, tenant, older_than)
    rows = connection_of(target).execute(cancel_matching_statement(matching))
    return [job_of_row(row) for row in rows]


def _cancellable_states(states: object) -> list[str]:
    if states is None:
        return list(CANCELLABLE_STATES)
    if isinstance(states, (str, JobState)) or not isinstance(states, Iterable):
        raise ValidationError(f"states must be a list of job states, not {shown(states)}")
    wanted = [_state_of(state).value for state in states]
    finished = sorted(set(wanted) - set(CANCELLABLE_STATES))
    if finished or not wanted:
        raise ValidationError(
            f"only {', '.join(CANCELLABLE_STATES)} jobs can be cancelled, not {finished or 'none'}"
        )
    return wanted


def list_jobs(
    target: Executor,
    *,
    state: JobState | str | None = None,
    tenant: str | None = None,
    kind: str | None = None,
    limit: int = 100,
) -> list[Job]:
    """Jobs in ``state`` (a :class:`JobState` or its value), of ``tenant`` and ``kind``.

    Every filter left ``None`` matches anything. At most ``limit`` jobs, the most recently
    created first. An unknown state raises :class:`~dms.errors.ValidationError`.
    """
    wanted = None if state is None else _state_of(state)
    _require_filters(kind, tenant, None)
    require_int("limit", limit, minimum=1)
    statement = list_statement(wanted, tenant, kind, limit)
    return [job_of_row(row) for row in connection_of(target).execute(statement)]


def _state_of(value: object) -> JobState:
    if isinstance(value, JobState):
        return value
    known = ", ".join(state.value for state in JobState)
    if not isinstance(value, str) or value not in {state.value for state in JobState}:
        raise ValidationError(f"state must be one of {known}, not {shown(value)}")
    return JobState(value)
