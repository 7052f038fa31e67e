"""Cancelling jobs and listing them by state (issue 14)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs
from dms.errors import InvalidTenantName, JobFinished, LeaseLost, NotFound, ValidationError
from dms.jobs.tables import processing_jobs
from dms.uow import UnitOfWork
from tests.jobs.conftest import count_effects, job_effects

LEASE = timedelta(minutes=5)


def _enqueue(engine: Engine, kind: str, tenant: str, **options: object) -> uuid.UUID:
    with engine.begin() as conn:
        return jobs.enqueue(conn, kind, {}, tenant=tenant, **options).job_id  # type: ignore[arg-type]


def _claim(engine: Engine, kind: str) -> jobs.Job:
    with engine.begin() as conn:
        (job,) = jobs.dequeue(conn, "w1", kinds=[kind], lease=LEASE)
    return job


def _cancel(engine: Engine, job_id: uuid.UUID) -> jobs.Job:
    with engine.begin() as conn:
        return jobs.cancel(conn, job_id)


def test_a_cancelled_queued_job_is_never_claimed(engine: Engine, tenant: str, kind: str) -> None:
    job_id = _enqueue(engine, kind, tenant)
    cancelled = _cancel(engine, job_id)
    with engine.begin() as conn:
        claimed = jobs.dequeue(conn, "w1", kinds=[kind])
        stored = jobs.get(conn, job_id)
    assert claimed == []
    assert (cancelled.state, stored.state) == (jobs.JobState.CANCELLED,) * 2
    assert stored.finished_at is not None
    assert stored.lease_expires_at is None


def test_a_cancelled_running_job_cannot_settle_and_its_writes_roll_back(
    engine: Engine, effects: str, kind: str
) -> None:
    tenant = effects
    job_id = _enqueue(engine, kind, tenant)
    running = _claim(engine, kind)
    cancelled = _cancel(engine, job_id)
    with UnitOfWork(engine, tenant=tenant) as uow:
        uow.connection.execute(sa.insert(job_effects).values(job_id=job_id, attempt=1, worker="w1"))
        with pytest.raises(LeaseLost):
            jobs.complete(uow, running)
    for late in (jobs.heartbeat, jobs.release):
        with engine.begin() as conn, pytest.raises(LeaseLost):
            late(conn, running)
    with engine.begin() as conn, pytest.raises(LeaseLost):
        jobs.fail(conn, running, "too late")
    with engine.begin() as conn:
        lost = jobs.complete_many(conn, [running]).lost
        stored = jobs.get(conn, job_id)
    assert [job.id for job in lost] == [job_id]
    assert (cancelled.state, cancelled.locked_by) == (jobs.JobState.CANCELLED, "w1")
    assert (stored.state, stored.last_error) == (jobs.JobState.CANCELLED, None)
    assert count_effects(engine, tenant, job_id) == 0


def test_a_dead_job_can_be_cancelled_and_leaves_the_dead_letter(
    engine: Engine, tenant: str, kind: str
) -> None:
    job_id = _enqueue(engine, kind, tenant, max_attempts=1)
    with engine.begin() as conn:
        jobs.fail(conn, _claim(engine, kind), "boom")
    _cancel(engine, job_id)
    with engine.begin() as conn:
        dead = jobs.dead_letter(conn, kind=kind)
        with pytest.raises(NotFound):
            jobs.requeue_dead_letter(conn, job_id)
    assert dead == []


def test_cancelling_twice_returns_the_cancelled_job(engine: Engine, tenant: str, kind: str) -> None:
    job_id = _enqueue(engine, kind, tenant)
    first = _cancel(engine, job_id)
    again = _cancel(engine, job_id)
    assert again == first


def test_a_done_job_cannot_be_cancelled(engine: Engine, tenant: str, kind: str) -> None:
    job_id = _enqueue(engine, kind, tenant)
    with engine.begin() as conn:
        done = jobs.complete(conn, _claim(engine, kind))
    with engine.begin() as conn, pytest.raises(JobFinished, match="is done"):
        jobs.cancel(conn, job_id)
    with engine.connect() as conn:
        assert jobs.get(conn, job_id) == done


def test_cancelling_an_unknown_job_says_not_found(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(NotFound, match="does not exist"):
        jobs.cancel(conn, uuid.uuid4())


def test_the_idempotency_key_of_a_cancelled_job_still_holds(
    engine: Engine, tenant: str, kind: str
) -> None:
    job_id = _enqueue(engine, kind, tenant, idempotency_key="once")
    _cancel(engine, job_id)
    with engine.begin() as conn:
        again = jobs.enqueue(conn, kind, {}, tenant=tenant, idempotency_key="once")
    assert again == jobs.Enqueued(job_id, created=False)


def test_prune_deletes_old_cancelled_jobs_like_done_ones(
    engine: Engine, tenant: str, kind: str
) -> None:
    job_id = _enqueue(engine, kind, tenant)
    _cancel(engine, job_id)
    with engine.begin() as conn:
        conn.execute(
            sa.update(processing_jobs)
            .where(processing_jobs.c.id == job_id)
            .values(finished_at=sa.func.now() - timedelta(days=30))
        )
        jobs.prune(conn)
        with pytest.raises(NotFound):
            jobs.get(conn, job_id)


def test_list_jobs_filters_by_state_tenant_and_kind_newest_first(
    engine: Engine, tenant: str, kind: str
) -> None:
    older, newer = _enqueue(engine, kind, tenant), _enqueue(engine, kind, tenant)
    other_kind = _enqueue(engine, f"{kind}.other", tenant)
    cancelled = _enqueue(engine, kind, tenant)
    _cancel(engine, cancelled)
    with engine.connect() as conn:
        queued = jobs.list_jobs(conn, state="queued", tenant=tenant, kind=kind)
        gone = jobs.list_jobs(conn, state=jobs.JobState.CANCELLED, kind=kind)
        one = jobs.list_jobs(conn, state="queued", kind=kind, limit=1)
        every = jobs.list_jobs(conn, tenant=tenant)
    assert [job.id for job in queued] == [newer, older]
    assert [job.id for job in gone] == [cancelled]
    assert [job.id for job in one] == [newer]
    assert {job.id for job in every} == {older, newer, other_kind, cancelled}


@pytest.mark.parametrize("state", ["finished", "QUEUED", "", None.__class__, 3])
def test_list_jobs_refuses_an_unknown_state(engine: Engine, state: object) -> None:
    with engine.connect() as conn, pytest.raises(ValidationError, match="state must be one of"):
        jobs.list_jobs(conn, state=state)  # type: ignore[arg-type]


def _states(engine: Engine, *job_ids: uuid.UUID) -> list[jobs.JobState]:
    with engine.connect() as conn:
        return [jobs.get(conn, job_id).state for job_id in job_ids]


def _cancel_matching(engine: Engine, **filters: object) -> set[uuid.UUID]:
    with engine.begin() as conn:
        return {job.id for job in jobs.cancel_matching(conn, **filters)}  # type: ignore[arg-type]


def test_cancel_matching_cancels_only_what_every_filter_matches(
    engine: Engine, tenant: str, kind: str
) -> None:
    other = f"{kind}.other"
    first, second = _enqueue(engine, kind, tenant), _enqueue(engine, kind, tenant)
    running = _claim(engine, kind).id
    (queued,) = {first, second} - {running}
    finished = _enqueue(engine, other, tenant)
    with engine.begin() as conn:
        (job,) = jobs.dequeue(conn, "w1", kinds=[other])
        jobs.complete(conn, job)
    waiting = _enqueue(engine, other, tenant)

    only_queued = _cancel_matching(engine, kind=kind, states=["queued"])
    none_old_enough = _cancel_matching(engine, tenant=tenant, older_than=timedelta(hours=1))
    rest = _cancel_matching(engine, tenant=tenant)

    assert (only_queued, none_old_enough, rest) == ({queued}, set(), {running, waiting})
    assert _states(engine, queued, running, waiting, finished) == [
        *(jobs.JobState.CANCELLED,) * 3,
        jobs.JobState.DONE,
    ]


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"states": ["done"]},
        {"states": ["cancelled", "queued"]},
        {"states": []},
        {"states": "queued"},
        {"states": ["sleeping"]},
        {"tenant": "Not A Tenant"},
        {"kind": ""},
        {"older_than": timedelta(days=-1)},
    ],
)
def test_cancel_matching_refuses_bad_or_missing_filters(
    engine: Engine, tenant: str, kind: str, filters: dict[str, object]
) -> None:
    job_id = _enqueue(engine, kind, tenant)
    with pytest.raises((ValidationError, InvalidTenantName)), engine.begin() as conn:
        jobs.cancel_matching(conn, **filters)  # type: ignore[arg-type]
    assert _states(engine, job_id) == [jobs.JobState.QUEUED]
