"""Claims, fenced acknowledgements, lease reclaim, backoff, dead letter and requeue."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs
from dms.errors import LeaseLost, NotFound, ValidationError
from dms.jobs.backoff import DEFAULT_BACKOFF
from dms.jobs.tables import processing_jobs
from dms.jobs.validation import MAX_LEASE
from dms.uow import UnitOfWork
from tests.jobs.conftest import count_effects, job_effects, wait_for

SHORT_LEASE = timedelta(milliseconds=500)


def _enqueue(engine: Engine, kind: str, tenant: str, **options: object) -> uuid.UUID:
    with engine.begin() as conn:
        return jobs.enqueue(conn, kind, {}, tenant=tenant, **options).job_id  # type: ignore[arg-type]


def _claim(engine: Engine, kind: str, worker: str, lease: timedelta = SHORT_LEASE) -> jobs.Job:
    with engine.begin() as conn:
        (job,) = jobs.dequeue(conn, worker, kinds=[kind], lease=lease)
    return job


def _reclaim(engine: Engine, kind: str, worker: str) -> jobs.Job:
    """Claim again once the previous lease has expired."""
    claimed: list[jobs.Job] = []

    def taken() -> bool:
        with engine.begin() as conn:
            claimed.extend(jobs.dequeue(conn, worker, kinds=[kind], lease=timedelta(minutes=5)))
        return bool(claimed)

    wait_for(taken, timeout=15, every=0.1)
    return claimed[0]


def _make_runnable(engine: Engine, job_id: uuid.UUID) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.update(processing_jobs)
            .where(processing_jobs.c.id == job_id)
            .values(run_at=sa.func.now())
        )


def test_claim_sets_lease_worker_and_attempt(engine: Engine, tenant: str, kind: str) -> None:
    job_id = _enqueue(engine, kind, tenant)
    job = _claim(engine, kind, "w1", lease=timedelta(seconds=30))
    assert (job.id, job.state, job.locked_by, job.attempts) == (
        job_id,
        jobs.JobState.RUNNING,
        "w1",
        1,
    )
    assert job.lease_expires_at is not None
    assert job.started_at is not None
    with engine.begin() as conn:
        assert jobs.dequeue(conn, "w2", kinds=[kind]) == []  # a valid lease is not taken over
        done = jobs.complete(conn, job)
    assert done.state is jobs.JobState.DONE
    assert done.finished_at is not None
    assert done.lease_expires_at is None


def test_dequeue_honours_priority_then_run_at(engine: Engine, tenant: str, kind: str) -> None:
    low = _enqueue(engine, kind, tenant, priority=5)
    first = _enqueue(engine, kind, tenant, priority=-1)
    second = _enqueue(engine, kind, tenant, priority=0)
    with engine.begin() as conn:
        claimed = jobs.dequeue(conn, "w", kinds=[kind], limit=2)
    assert [j.id for j in claimed] == [first, second]
    assert low not in {j.id for j in claimed}


def test_late_complete_after_a_reclaim_raises_lease_lost(
    engine: Engine, effects: str, kind: str
) -> None:
    tenant = effects
    job_id = _enqueue(engine, kind, tenant)
    slow = _claim(engine, kind, "slow-worker")
    fast = _reclaim(engine, kind, "fast-worker")
    assert (fast.id, fast.attempts, fast.locked_by) == (job_id, 2, "fast-worker")
    # The slow worker wakes up: its writes and its completion must not count.
    with UnitOfWork(engine, tenant=tenant) as uow:
        uow.connection.execute(
            sa.insert(job_effects).values(job_id=job_id, attempt=slow.attempts, worker="slow")
        )
        with pytest.raises(LeaseLost):
            jobs.complete(uow, slow)
    for late in (jobs.complete, jobs.heartbeat, jobs.release):
        with engine.begin() as conn, pytest.raises(LeaseLost):
            late(conn, slow)
    with engine.begin() as conn, pytest.raises(LeaseLost):
        jobs.fail(conn, slow, "too late")
    with UnitOfWork(engine, tenant=tenant) as uow:
        uow.connection.execute(
            sa.insert(job_effects).values(job_id=job_id, attempt=fast.attempts, worker="fast")
        )
        jobs.complete(uow, fast)
        uow.commit()
    with engine.begin() as conn:
        final = jobs.get(conn, job_id)
        with pytest.raises(LeaseLost):
            jobs.complete(conn, slow)
    assert (final.state, final.locked_by, final.attempts) == (jobs.JobState.DONE, "fast-worker", 2)
    assert "lease of worker slow-worker expired during attempt 1" in (final.last_error or "")
    assert count_effects(engine, tenant, job_id) == 1


def test_heartbeat_extends_the_lease(engine: Engine, tenant: str, kind: str) -> None:
    _enqueue(engine, kind, tenant)
    job = _claim(engine, kind, "w", lease=timedelta(seconds=5))
    with engine.begin() as conn:
        renewed = jobs.heartbeat(conn, job, lease=timedelta(hours=1))
        assert jobs.dequeue(conn, "other", kinds=[kind]) == []
    assert renewed.lease_expires_at is not None
    assert job.lease_expires_at is not None
    assert renewed.lease_expires_at - job.lease_expires_at > timedelta(minutes=50)
    assert (renewed.attempts, renewed.locked_by) == (job.attempts, job.locked_by)


@pytest.mark.parametrize(
    "lease", [timedelta(0), MAX_LEASE + timedelta(seconds=1), timedelta(days=999_999_999)]
)
def test_heartbeat_refuses_a_bad_lease_and_keeps_the_old_one(
    engine: Engine, tenant: str, kind: str, lease: timedelta
) -> None:
    _enqueue(engine, kind, tenant)
    job = _claim(engine, kind, "w", lease=timedelta(minutes=5))
    with engine.begin() as conn:
        with pytest.raises(ValidationError):
            jobs.heartbeat(conn, job, lease=lease)
        stored = jobs.get(conn, job.id)
    assert stored.lease_expires_at == job.lease_expires_at


def test_the_longest_lease_is_accepted(engine: Engine, tenant: str, kind: str) -> None:
    _enqueue(engine, kind, tenant)
    job = _claim(engine, kind, "w", lease=MAX_LEASE)
    with engine.begin() as conn:
        renewed = jobs.heartbeat(conn, job, lease=MAX_LEASE)
    assert renewed.lease_expires_at is not None
    assert job.started_at is not None
    assert renewed.lease_expires_at - job.started_at >= MAX_LEASE


def test_release_requeues_without_an_attempt_penalty(
    engine: Engine, tenant: str, kind: str
) -> None:
    _enqueue(engine, kind, tenant)
    job = _claim(engine, kind, "w")
    with engine.begin() as conn:
        released = jobs.release(conn, job)
    assert (released.state, released.attempts) == (jobs.JobState.QUEUED, 0)
    assert released.lease_expires_at is None
    again = _claim(engine, kind, "w2")
    assert again.attempts == 1


def test_backoff_schedule_from_run_at_for_every_attempt(
    engine: Engine, tenant: str, kind: str
) -> None:
    policy = jobs.Backoff(initial_seconds=10, step_seconds=20, maximum_seconds=45)
    job_id = _enqueue(engine, kind, tenant, max_attempts=4, backoff=policy)
    expected = [timedelta(seconds=s) for s in (10, 30, 45)]  # 50 is capped at 45
    for attempt, delay in enumerate(expected, start=1):
        job = _claim(engine, kind, "w")
        assert job.attempts == attempt
        with engine.begin() as conn:
            failed = jobs.fail(conn, job, RuntimeError(f"failure {attempt}"))
            now = conn.scalar(sa.select(sa.func.now()))
        assert failed.state is jobs.JobState.QUEUED
        assert now is not None
        assert failed.run_at - now == delay
        with engine.begin() as conn:
            assert jobs.dequeue(conn, "w", kinds=[kind]) == []  # waits for run_at
        _make_runnable(engine, job_id)
    last = _claim(engine, kind, "w")
    with engine.begin() as conn:
        dead = jobs.fail(conn, last, RuntimeError("failure 4"))
    assert dead.state is jobs.JobState.DEAD
    assert dead.attempts == 4
    assert dead.finished_at is not None
    assert dead.lease_expires_at is None
    assert dead.last_error == "RuntimeError: failure 4"  # never raised: no traceback
    assert [e["error"] for e in dead.errors] == [f"RuntimeError: failure {n}" for n in range(1, 5)]
    assert [e["attempt"] for e in dead.errors] == [1, 2, 3, 4]


def test_kind_backoff_applies_unless_the_job_has_its_own(
    engine: Engine, tenant: str, kind: str
) -> None:
    per_kind = jobs.Backoff(initial_seconds=100, step_seconds=0, maximum_seconds=100)
    own = jobs.Backoff(initial_seconds=7, step_seconds=0, maximum_seconds=7)
    plain = _enqueue(engine, kind, tenant, priority=1)
    with_own = _enqueue(engine, kind, tenant, priority=2, backoff=own)
    delays = {}
    for _ in range(2):
        job = _claim(engine, kind, "w")
        with engine.begin() as conn:
            failed = jobs.fail(conn, job, "x", backoff=per_kind)
            now = conn.scalar(sa.select(sa.func.now()))
        assert now is not None
        delays[job.id] = failed.run_at - now
    assert delays == {plain: timedelta(seconds=100), with_own: timedelta(seconds=7)}


def test_default_backoff_schedule() -> None:
    policy = DEFAULT_BACKOFF
    assert [policy.delay(n).total_seconds() for n in (1, 2, 3, 4)] == [10, 40, 70, 100]
    assert policy.delay(1000) == timedelta(hours=1)


def test_a_job_that_keeps_killing_its_worker_ends_dead(
    engine: Engine, tenant: str, kind: str
) -> None:
    job_id = _enqueue(engine, kind, tenant, max_attempts=2)
    _claim(engine, kind, "crash-1")
    _reclaim(engine, kind, "crash-2")
    with engine.begin() as conn:
        conn.execute(  # the second worker dies too: its lease runs out
            sa.update(processing_jobs)
            .where(processing_jobs.c.id == job_id)
            .values(lease_expires_at=sa.func.now() - timedelta(seconds=1))
        )
    with engine.begin() as conn:
        assert jobs.dequeue(conn, "w3", kinds=[kind]) == []
        dead = jobs.get(conn, job_id)
    assert (dead.state, dead.attempts) == (jobs.JobState.DEAD, 2)
    assert dead.last_error == "lease of worker crash-2 expired during attempt 2"
    assert [e["worker"] for e in dead.errors] == ["crash-1", "crash-2"]


def _dead_job(engine: Engine, kind: str, tenant: str) -> uuid.UUID:
    job_id = _enqueue(engine, kind, tenant, max_attempts=1)
    with engine.begin() as conn:
        (job,) = jobs.dequeue(conn, "w", kinds=[kind])
        jobs.fail(conn, job, ValueError("bad document"))
    return job_id


def test_requeue_a_dead_job(engine: Engine, tenant: str, kind: str) -> None:
    job_id = _dead_job(engine, kind, tenant)
    with engine.begin() as conn:
        requeued = jobs.requeue_dead_letter(conn, job_id)
        with pytest.raises(NotFound):
            jobs.requeue_dead_letter(conn, job_id)  # not dead any more
        with pytest.raises(NotFound):
            jobs.requeue_dead_letter(conn, uuid.uuid4())
    assert (requeued.state, requeued.attempts) == (jobs.JobState.QUEUED, 0)
    assert requeued.finished_at is None
    assert len(requeued.errors) == 1  # the history stays
    again = _claim(engine, kind, "w")
    assert (again.id, again.attempts) == (job_id, 1)


def test_requeue_dead_jobs_by_filter(engine: Engine, tenant: str, kind: str) -> None:
    other_kind = f"{kind}.other"
    mine = [_dead_job(engine, kind, tenant) for _ in range(3)]
    other = _dead_job(engine, other_kind, tenant)
    with engine.begin() as conn:
        listed = jobs.dead_letter(conn, kind=kind)
        assert jobs.requeue_dead_letters(conn, kind=kind, older_than=timedelta(hours=1)) == []
        moved = jobs.requeue_dead_letters(conn, kind=kind, tenant=tenant)
        assert jobs.get(conn, other).state is jobs.JobState.DEAD
        moved_other = jobs.requeue_dead_letters(conn, kind=other_kind, older_than=timedelta(0))
    assert sorted(j.id for j in listed) == sorted(mine)
    assert sorted(j.id for j in moved) == sorted(mine)
    assert all(j.state is jobs.JobState.QUEUED and j.attempts == 0 for j in moved)
    assert [j.id for j in moved_other] == [other]


def test_prune_deletes_only_old_finished_jobs(engine: Engine, tenant: str, kind: str) -> None:
    old_done = _enqueue(engine, kind, tenant)
    _claim(engine, kind, "w")
    with engine.begin() as conn:
        conn.execute(
            sa.update(processing_jobs)
            .where(processing_jobs.c.id == old_done)
            .values(
                state="done",
                lease_expires_at=None,
                finished_at=sa.func.now() - timedelta(days=10),
            )
        )
    fresh_dead = _dead_job(engine, kind, tenant)
    queued = _enqueue(engine, kind, tenant)
    with engine.begin() as conn:
        jobs.prune(conn, older_than=timedelta(days=1), include_dead=True)
        with pytest.raises(NotFound):
            jobs.get(conn, old_done)
        assert jobs.get(conn, fresh_dead).state is jobs.JobState.DEAD
        assert jobs.get(conn, queued).state is jobs.JobState.QUEUED
