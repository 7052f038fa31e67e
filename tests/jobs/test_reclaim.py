"""reclaim_expired: an expired lease requeues its job (an attempt counted) or buries it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs
from dms.errors import LeaseLost, ValidationError
from dms.jobs.claims import release_unheld
from dms.jobs.tables import processing_jobs
from dms.jobs.worker import JobUnitOfWork
from tests.jobs.conftest import wait_for

LONG_LEASE = timedelta(minutes=5)


@pytest.fixture
def tenant(module_tenant: str) -> str:
    """Every test here puts only jobs of its own kind in its tenant, and filters every assertion
    by it: they share the module's (a tenant costs a fifth of a second here, seconds on Citus)."""
    return module_tenant


def _claimed(engine: Engine, kind: str, tenant: str, worker: str, **options: object) -> jobs.Job:
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant, **options)  # type: ignore[arg-type]
        (job,) = jobs.dequeue(conn, worker, kinds=[kind], lease=LONG_LEASE, reclaim=False)
    return job


def _expire(engine: Engine, job_id: uuid.UUID) -> None:
    """The worker holding ``job_id`` died: its lease ran out (no sleeping in tests)."""
    with engine.begin() as conn:
        conn.execute(
            sa.update(processing_jobs)
            .where(processing_jobs.c.id == job_id)
            .values(lease_expires_at=sa.func.now() - timedelta(seconds=1))
        )


def test_a_reclaimed_job_counts_the_attempt_and_records_the_lease_expiry(
    engine: Engine, tenant: str, kind: str
) -> None:
    lost = _claimed(engine, kind, tenant, "w1")
    _expire(engine, lost.id)
    with engine.begin() as conn:
        (reclaimed,) = jobs.reclaim_expired(conn, kinds=[kind])
    assert (reclaimed.id, reclaimed.state, reclaimed.attempts) == (
        lost.id,
        jobs.JobState.QUEUED,
        1,
    )
    assert reclaimed.lease_expires_at is None
    assert reclaimed.finished_at is None
    assert reclaimed.last_error == "lease of worker w1 expired during attempt 1"
    assert [(e["worker"], e["attempt"]) for e in reclaimed.errors] == [("w1", 1)]
    assert reclaimed.errors[0]["error"] == reclaimed.last_error
    # Reclaimed by a worker of the same name, the job still gets a new fence: attempts + 1.
    with engine.begin() as conn:
        (again,) = jobs.dequeue(conn, "w1", kinds=[kind], lease=LONG_LEASE, reclaim=False)
    assert (again.id, again.state, again.attempts) == (lost.id, jobs.JobState.RUNNING, 2)


def test_the_old_worker_cannot_acknowledge_a_reclaimed_job(
    engine: Engine, tenant: str, kind: str
) -> None:
    lost = _claimed(engine, kind, tenant, "w1")
    _expire(engine, lost.id)
    with engine.begin() as conn:
        jobs.reclaim_expired(conn, kinds=[kind])
    # Between the reclaim and the next claim: the job is queued, every late ack is refused.
    for late in (jobs.complete, jobs.heartbeat, jobs.release):
        with engine.begin() as conn, pytest.raises(LeaseLost):
            late(conn, lost)
    with engine.begin() as conn:
        assert jobs.complete_many(conn, [lost]).lost == (lost,)
        (again,) = jobs.dequeue(conn, "w1", kinds=[kind], lease=LONG_LEASE, reclaim=False)
    # After the next claim: still refused, and the new claim's result stands.
    with engine.begin() as conn, pytest.raises(LeaseLost):
        jobs.fail(conn, lost, "too late")
    with engine.begin() as conn:
        done = jobs.complete(conn, again)
        with pytest.raises(LeaseLost):
            jobs.complete(conn, lost)
    assert (done.state, done.attempts) == (jobs.JobState.DONE, 2)


def test_a_lease_that_expired_on_the_last_attempt_is_buried(
    engine: Engine, tenant: str, kind: str
) -> None:
    lost = _claimed(engine, kind, tenant, "w1", max_attempts=1)
    _expire(engine, lost.id)
    with engine.begin() as conn:
        (buried,) = jobs.reclaim_expired(conn, kinds=[kind])
        assert jobs.dequeue(conn, "w2", kinds=[kind]) == []
        with pytest.raises(LeaseLost):
            jobs.complete(conn, lost)
    assert (buried.state, buried.attempts) == (jobs.JobState.DEAD, 1)
    assert buried.finished_at is not None
    assert buried.lease_expires_at is None
    assert buried.last_error == "lease of worker w1 expired during attempt 1"
    assert [e["worker"] for e in buried.errors] == ["w1"]


def test_only_expired_leases_of_the_given_kinds_are_reclaimed(
    engine: Engine, tenant: str, kind: str
) -> None:
    other = f"{kind}.other"
    valid = _claimed(engine, kind, tenant, "w1")
    expired = _claimed(engine, kind, tenant, "w1")
    elsewhere = _claimed(engine, other, tenant, "w1")
    _expire(engine, expired.id)
    _expire(engine, elsewhere.id)
    with engine.begin() as conn:
        assert [j.id for j in jobs.reclaim_expired(conn, kinds=[kind])] == [expired.id]
        assert jobs.get(conn, valid.id).state is jobs.JobState.RUNNING
        assert jobs.get(conn, elsewhere.id).state is jobs.JobState.RUNNING
        assert jobs.reclaim_expired(conn, kinds=[kind]) == []


def test_a_claim_without_reclaim_leaves_expired_leases_alone(
    engine: Engine, tenant: str, kind: str
) -> None:
    lost = _claimed(engine, kind, tenant, "w1")
    _expire(engine, lost.id)
    with engine.begin() as conn:
        assert jobs.dequeue(conn, "w2", kinds=[kind], reclaim=False) == []
        # The default dequeue reclaims first, then claims: one call takes the job over.
        (taken,) = jobs.dequeue(conn, "w2", kinds=[kind], lease=LONG_LEASE)
    assert (taken.id, taken.locked_by, taken.attempts) == (lost.id, "w2", 2)
    assert taken.last_error == "lease of worker w1 expired during attempt 1"


def test_the_worker_reclaims_an_expired_lease_and_completes_the_job(
    engine: Engine, tenant: str, kind: str
) -> None:
    lost = _claimed(engine, kind, tenant, "crashed")
    _expire(engine, lost.id)
    ran: list[int] = []

    def handler(uow: JobUnitOfWork, job: jobs.Job) -> None:
        ran.append(job.attempts)

    with jobs.Worker(engine, {kind: handler}, jobs.WorkerConfig(poll_seconds=0.1)):

        def done() -> bool:
            with engine.connect() as conn:
                return jobs.get(conn, lost.id).state is jobs.JobState.DONE

        wait_for(done, timeout=20)
    assert ran == [2]


def test_reclaim_rejects_a_bad_limit(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(ValidationError):
        jobs.reclaim_expired(conn, limit=0)


def test_dequeue_in_a_transaction_leaves_the_planner_settings_as_they_were(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant)
    with engine.begin() as conn:
        jit = conn.scalar(sa.select(sa.func.current_setting("jit")))
        (job,) = jobs.dequeue(conn, "w", kinds=[kind], lease=LONG_LEASE)
        assert conn.scalar(sa.select(sa.func.current_setting("enable_sort"))) == "on"
        assert conn.scalar(sa.select(sa.func.current_setting("enable_bitmapscan"))) == "on"
        assert conn.scalar(sa.select(sa.func.current_setting("jit"))) == jit
        assert job.attempts == 1


def test_claim_batch_takes_queued_jobs_in_queue_order(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        later = jobs.enqueue(conn, kind, {}, tenant=tenant, priority=1).job_id
        first = jobs.enqueue(conn, kind, {}, tenant=tenant, priority=-1).job_id
    with engine.connect() as conn:
        claimed = jobs.claim_batch(conn, "w", kinds=[kind], limit=5, lease=LONG_LEASE)
    assert [j.id for j in claimed] == [first, later]
    assert {j.attempts for j in claimed} == {1}


def test_prefetch_must_be_a_non_negative_integer(engine: Engine) -> None:
    with pytest.raises(ValidationError):
        jobs.Worker(engine, {"k": lambda uow, job: None}, jobs.WorkerConfig(prefetch=-1))


def test_a_worker_gives_back_the_jobs_it_runs_but_does_not_hold(
    engine: Engine, tenant: str, kind: str
) -> None:
    """release_unheld, the sweep of a worker that lost a claim's reply."""
    name = f"w-{uuid.uuid4().hex[:8]}"
    held = _claimed(engine, kind, tenant, name)
    lost = _claimed(engine, kind, tenant, name)
    others = _claimed(engine, kind, tenant, f"{name}-other")
    with engine.begin() as conn:
        (released,) = release_unheld(conn, name, held={held.id})
    assert (released.id, released.state, released.attempts) == (lost.id, jobs.JobState.QUEUED, 0)
    assert (released.lease_expires_at, released.errors) == (None, ())
    with engine.connect() as conn:
        assert jobs.get(conn, held.id).state is jobs.JobState.RUNNING
        assert jobs.get(conn, others.id).state is jobs.JobState.RUNNING
    with engine.begin() as conn, pytest.raises(LeaseLost):
        jobs.complete(conn, lost)  # the lost claim's late acknowledgement changes nothing


@pytest.mark.parametrize("held", [["not-a-uuid"], [None]])
def test_release_unheld_refuses_what_is_not_a_job_id(engine: Engine, held: list[object]) -> None:
    with engine.begin() as conn, pytest.raises(ValidationError, match="job ids"):
        release_unheld(conn, "w1", held=held)  # type: ignore[arg-type]
