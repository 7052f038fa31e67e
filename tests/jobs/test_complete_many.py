"""complete_many: many fenced completions in one statement."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs
from dms.errors import ValidationError
from tests.jobs.conftest import count_jobs, wait_for


@pytest.fixture
def tenant(module_tenant: str) -> str:
    """Every test here puts only jobs of its own kind in its tenant, and filters every assertion
    by it: they share the module's (a tenant costs a fifth of a second here, seconds on Citus)."""
    return module_tenant


def _claim(engine: Engine, kind: str, tenant: str, count: int, lease: timedelta) -> list[jobs.Job]:
    with engine.begin() as conn:
        jobs.enqueue_many(conn, [jobs.NewJob(kind=kind, payload={}, tenant=tenant)] * count)
    with engine.begin() as conn:
        return jobs.dequeue(conn, "batcher", kinds=[kind], limit=count, lease=lease)


def test_complete_many_completes_every_job_in_one_statement(
    engine: Engine, tenant: str, kind: str
) -> None:
    claimed = _claim(engine, kind, tenant, 5, timedelta(minutes=5))
    updates: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "UPDATE" in statement:
            updates.append(statement)

    with engine.begin() as conn:
        sa.event.listen(conn, "before_cursor_execute", record)
        outcome = jobs.complete_many(conn, claimed)
        sa.event.remove(conn, "before_cursor_execute", record)
        assert count_jobs(conn, kind, "done") == 5
    assert len(updates) == 1
    assert outcome == jobs.Completion(completed=tuple(j.id for j in claimed), lost=())


def test_a_lost_lease_is_reported_and_the_others_complete(
    engine: Engine, tenant: str, kind: str
) -> None:
    claimed = _claim(engine, kind, tenant, 3, timedelta(milliseconds=300))
    stale = claimed[1]
    # Renew the two others; the stale job's lease expires and another worker reclaims it.
    with engine.begin() as conn:
        kept = [
            jobs.heartbeat(conn, j, lease=timedelta(minutes=5)) for j in (claimed[0], claimed[2])
        ]
    reclaimed: list[jobs.Job] = []

    def taken() -> bool:
        with engine.begin() as conn:
            reclaimed.extend(jobs.dequeue(conn, "thief", kinds=[kind]))
        return bool(reclaimed)

    wait_for(taken, timeout=15, every=0.1)
    assert (reclaimed[0].id, reclaimed[0].attempts) == (stale.id, 2)
    with engine.begin() as conn:
        outcome = jobs.complete_many(conn, [kept[0], stale, kept[1]])
    assert outcome.completed == (kept[0].id, kept[1].id)
    assert outcome.lost == (stale,)
    with engine.begin() as conn:
        # The reclaiming worker's result stands, once: a second batched completion is lost.
        assert jobs.get(conn, stale.id).locked_by == "thief"
        jobs.complete(conn, reclaimed[0])
        again = jobs.complete_many(conn, [kept[0], reclaimed[0]])
        assert again.completed == ()
        assert count_jobs(conn, kind, "done") == 3


def test_complete_many_refuses_duplicates_and_accepts_nothing(
    engine: Engine, tenant: str, kind: str
) -> None:
    (job,) = _claim(engine, kind, tenant, 1, timedelta(minutes=5))
    with engine.begin() as conn:
        with pytest.raises(ValidationError):
            jobs.complete_many(conn, [job, job])
        assert jobs.complete_many(conn, []) == jobs.Completion(completed=(), lost=())
        assert count_jobs(conn, kind, "running") == 1


def test_a_worker_completes_handlers_that_do_not_write_exactly_once_in_batches(
    engine: Engine, tenant: str, kind: str
) -> None:
    total = 500
    with engine.begin() as conn:
        jobs.enqueue_many(conn, [jobs.NewJob(kind=kind, payload={}, tenant=tenant)] * total)
    runs: list[tuple[object, int]] = []

    def noop(uow: object, job: jobs.Job) -> None:
        runs.append((job.id, job.attempts))

    with jobs.Worker(
        engine, {kind: noop}, jobs.WorkerConfig(concurrency=4, batch_size=16, poll_seconds=0.2)
    ):

        def all_done() -> bool:
            with engine.connect() as conn:
                return count_jobs(conn, kind, "done") == total

        wait_for(all_done, timeout=60)
    assert len(runs) == total
    assert len({job_id for job_id, _ in runs}) == total
    assert {attempts for _, attempts in runs} == {1}
