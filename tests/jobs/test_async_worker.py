"""``async def`` handlers: many jobs in flight on one event loop, and what only asyncio has.

The worker's contract for both kinds of handler (writes committed with the completion,
retries, dead letter, lost leases, killed connections) is tested once for both, in
test_worker.py (the ``handler_style`` fixture); here: concurrency on one thread, the async
unit of work's repositories, cancellation at a stop, and the refusals.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import dms
from dms import jobs
from dms.aio import AsyncUnitOfWork
from dms.aio import jobs as async_jobs
from dms.errors import ValidationError
from dms.jobs.worker import AsyncTenantTransaction, TenantTransaction
from dms.uow import UnitOfWork
from tests.jobs.conftest import count_effects, count_jobs, job_effects, wait_for


def _enqueue(engine: Engine, kind: str, tenant: str, count: int = 1) -> list[uuid.UUID]:
    batch = [jobs.NewJob(kind=kind, payload={"i": i}, tenant=tenant) for i in range(count)]
    with engine.begin() as conn:
        return [r.job_id for r in jobs.enqueue_many(conn, batch)]


def _job(engine: Engine, job_id: uuid.UUID) -> jobs.Job:
    with engine.connect() as conn:
        return jobs.get(conn, job_id)


def _done(engine: Engine, kind: str) -> int:
    with engine.connect() as conn:
        return count_jobs(conn, kind, "done")


def test_one_event_loop_runs_as_many_jobs_at_once_as_its_concurrency(
    engine: Engine, tenant: str, kind: str
) -> None:
    """Forty handlers each wait until all forty have started: only jobs in flight together
    can finish, and they all run on one thread."""
    total = 40
    _enqueue(engine, kind, tenant, total)
    started: list[int] = []
    threads: set[int] = set()
    everyone: list[asyncio.Event] = []

    async def gather_then_finish(uow: AsyncTenantTransaction[Any], job: jobs.Job) -> None:
        if not everyone:
            everyone.append(asyncio.Event())  # made on the worker's loop
        threads.add(threading.get_ident())
        started.append(job.payload["i"])
        if len(started) == total:
            everyone[0].set()
        await asyncio.wait_for(everyone[0].wait(), timeout=30)

    config = jobs.WorkerConfig(concurrency=total, poll_seconds=0.1)
    with jobs.Worker(engine, {kind: gather_then_finish}, config) as worker:
        wait_for(lambda: _done(engine, kind) == total, timeout=60)
    # Read once stopped: a batch's completion commits before the worker counts it.
    stats = worker.stats()
    assert sorted(started) == list(range(total))
    assert len(threads) == 1
    assert (stats.runners, stats.completed, stats.failed) == (1, total, 0)


def test_an_async_handler_works_through_the_async_unit_of_work(
    engine: Engine, tenant: str, user_id: uuid.UUID, kind: str
) -> None:
    """dms.DocumentWorker: the handler renames a document and enqueues a follow-up through
    dms.aio; both commit with the job's completion."""
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        document = uow.documents.add(title="scan-001.pdf")
        uow.commit()
    follow_up = f"{kind}.next"
    (job_id,) = _enqueue(engine, kind, tenant)

    async def rename(uow: AsyncUnitOfWork, job: jobs.Job) -> None:
        current = await uow.documents.get(document.id)
        await uow.documents.rename(
            document.id, title=f"Invoice ({current.title})", version=current.version
        )
        await async_jobs.enqueue(uow, follow_up, {"document": str(document.id)}, tenant=tenant)

    with dms.DocumentWorker(engine, {kind: rename}, jobs.WorkerConfig(poll_seconds=0.1)):
        wait_for(lambda: _job(engine, job_id).state is jobs.JobState.DONE)
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.documents.get(document.id).title == "Invoice (scan-001.pdf)"
    with engine.connect() as conn:
        assert count_jobs(conn, follow_up, "queued") == 1


def test_a_stop_cancels_handlers_past_the_grace_period_and_releases_their_jobs(
    engine: Engine, effects: str, kind: str
) -> None:
    """The handler wrote, then waits for ever: past the grace period it is cancelled at its
    await, its unit rolls back, and the job goes back to the queue without an attempt."""
    (job_id,) = _enqueue(engine, kind, effects)
    cancelled = threading.Event()

    async def endless(uow: AsyncTenantTransaction[Any], job: jobs.Job) -> None:
        await uow.run(
            lambda unit: unit.connection.execute(
                sa.insert(job_effects).values(job_id=job.id, attempt=job.attempts, worker="w")
            )
        )
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = jobs.Worker(engine, {kind: endless}, jobs.WorkerConfig(poll_seconds=0.1))
    worker.start()
    wait_for(lambda: len(worker.running_jobs) == 1)
    worker.stop(grace_seconds=0.5)
    assert cancelled.is_set()
    assert worker.join(timeout=10)
    released = _job(engine, job_id)
    assert (released.state, released.attempts) == (jobs.JobState.QUEUED, 0)
    assert count_effects(engine, effects, job_id) == 0


def test_what_would_end_a_runner_thread_fails_the_job_and_the_loop_goes_on(
    engine: Engine, tenant: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SystemExit from a handler (and a CancelledError it did not catch) is logged with the
    job and recorded as a failed attempt; the other jobs of the loop are not disturbed."""
    first, second, third = _enqueue(engine, kind, tenant, 3)
    no_retry = {kind: jobs.Backoff(initial_seconds=3600, step_seconds=0, maximum_seconds=3600)}

    async def handler(uow: AsyncTenantTransaction[Any], job: jobs.Job) -> None:
        if job.id == first:
            raise SystemExit(3)
        if job.id == second:
            raise asyncio.CancelledError

    config = jobs.WorkerConfig(concurrency=2, poll_seconds=0.1, backoff=no_retry)
    with caplog.at_level(logging.ERROR), jobs.Worker(engine, {kind: handler}, config) as worker:
        wait_for(lambda: _job(engine, third).state is jobs.JobState.DONE)
        # The worker counts a completion once its commit returned, a moment after the row
        # reads done: wait for the counts, not only for the rows.
        wait_for(lambda: (worker.stats().failed, worker.stats().completed) == (2, 1))
        stats = worker.stats()
    assert (stats.runners_alive, stats.completed) == (1, 1)
    exited, cancelled = _job(engine, first), _job(engine, second)
    assert exited.state is jobs.JobState.QUEUED  # retried later: one attempt of its three
    assert exited.errors[-1]["error"] == "SystemExit: 3"
    assert cancelled.errors[-1]["error"] == "RuntimeError: the handler was cancelled"
    assert any(
        str(first) in r.getMessage() and "SystemExit" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR
    )


def test_async_handlers_query_through_the_workers_database_settings_and_leave_no_connection(
    engine: Engine, tenant: str, kind: str
) -> None:
    """The loop's engine is made like the worker's (its URL, here its application_name), runs
    at most ``concurrency`` statements at once, and is disposed when the worker stops."""
    total, concurrency = 30, 3
    _enqueue(engine, kind, tenant, total)
    app = f"dms-async-{uuid.uuid4().hex[:8]}"
    worker_engine = dms.create_engine(engine.url.update_query_dict({"application_name": app}))
    sleeping = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :a"
        " AND state = 'active' AND query LIKE 'SELECT pg_sleep(0.05)%'"
    )
    connected = sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a")

    def count(query: sa.TextClause) -> int:
        with engine.connect() as conn:
            return int(conn.scalar(query, {"a": app}) or 0)

    async def query(uow: AsyncTenantTransaction[Any], job: jobs.Job) -> None:
        await uow.run(lambda unit: unit.connection.execute(sa.text("SELECT pg_sleep(0.05)")))

    samples: list[int] = []
    config = jobs.WorkerConfig(concurrency=concurrency, poll_seconds=0.1, listen=False)
    try:
        with jobs.Worker(worker_engine, {kind: query}, config):
            deadline = time.monotonic() + 60
            while _done(engine, kind) < total and time.monotonic() < deadline:
                samples.append(count(sleeping))
        assert _done(engine, kind) == total
        worker_engine.dispose()  # the worker's own pool: what is left is the loop's
        wait_for(lambda: count(connected) == 0, timeout=10)
    finally:
        worker_engine.dispose()
    assert 1 <= max(samples) <= concurrency


def test_one_worker_runs_plain_handlers_on_threads_and_async_ones_on_its_loop(
    engine: Engine, tenant: str, kind: str
) -> None:
    """dms worker runs dms's own handlers (plain) beside an application's async ones."""
    plain_kind, async_kind = f"{kind}.plain", f"{kind}.async"
    ran: dict[str, set[str]] = {plain_kind: set(), async_kind: set()}

    def plain(uow: Any, job: jobs.Job) -> None:
        ran[job.kind].add(threading.current_thread().name)

    async def awaited(uow: Any, job: jobs.Job) -> None:
        ran[job.kind].add(threading.current_thread().name)
        await asyncio.sleep(0.001)

    _enqueue(engine, plain_kind, tenant, 10)
    _enqueue(engine, async_kind, tenant, 10)
    handlers: dict[str, Any] = {plain_kind: plain, async_kind: awaited}
    config = jobs.WorkerConfig(concurrency=2, poll_seconds=0.1)
    with jobs.Worker(engine, handlers, config) as worker:
        wait_for(lambda: _done(engine, plain_kind) == 10 and _done(engine, async_kind) == 10)
        running = worker.stats()
    # Counted once stopped: a batch's completion commits before the worker counts it.
    assert (running.runners, running.runners_alive, worker.stats().completed) == (3, 3, 20)
    assert len(ran[async_kind]) == 1  # the loop's one thread
    assert ran[async_kind].isdisjoint(ran[plain_kind])


def test_a_unit_of_work_factory_for_mixed_handlers_is_refused(engine: Engine) -> None:
    """A factory makes the units of one kind of handler: async and plain need different ones."""

    async def awaited(uow: Any, job: jobs.Job) -> None:
        """An async handler."""

    def plain(uow: Any, job: jobs.Job) -> None:
        """A thread handler."""

    handlers: dict[str, Any] = {"a": awaited, "b": plain}
    with pytest.raises(ValidationError, match=r"mix async def \(a\) and plain functions \(b\)"):
        jobs.Worker(engine, handlers, unit_of_work=TenantTransaction.factory(engine))
    jobs.Worker(engine, handlers)  # the control: each kind with its own default unit


def test_an_async_handler_annotated_with_a_unit_the_worker_does_not_give_is_refused(
    engine: Engine,
) -> None:
    async def documents(uow: AsyncUnitOfWork, job: jobs.Job) -> None:
        """Needs the repositories, which the bare async transaction does not have."""

    with pytest.raises(ValidationError, match="takes a AsyncUnitOfWork, and this worker gives"):
        jobs.Worker(engine, {"a": documents})
    dms.DocumentWorker(engine, {"a": documents})  # the control: it gives an AsyncUnitOfWork


def test_a_plain_handler_annotated_with_the_async_unit_is_refused(engine: Engine) -> None:
    def confused(uow: AsyncUnitOfWork, job: jobs.Job) -> None:
        """Written for the async unit, but not async def."""

    with pytest.raises(ValidationError, match="takes a AsyncUnitOfWork"):
        dms.DocumentWorker(engine, {"k": confused})  # type: ignore[dict-item]
