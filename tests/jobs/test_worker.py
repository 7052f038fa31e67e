"""The worker: handlers in a unit of work, failures, wake-up, shutdown, dropped connections."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

import dms
from dms import jobs
from dms.aio import AsyncUnitOfWork
from dms.errors import ValidationError
from dms.jobs.tables import processing_jobs
from dms.jobs.validation import MAX_LEASE
from dms.jobs.worker import AsyncTenantTransaction, JobUnitOfWork, TenantTransaction
from dms.uow import UnitOfWork
from tests.jobs.conftest import count_effects, count_jobs, job_effects, styled, wait_for

FAST_RETRY = jobs.Backoff(initial_seconds=0, step_seconds=0, maximum_seconds=0)
#: What an async def handler gets, by the unit a plain handler of the same worker gets.
ASYNC_UNITS: dict[type, type] = {
    UnitOfWork: AsyncUnitOfWork,
    TenantTransaction: AsyncTenantTransaction,
}


def record_effect(uow: JobUnitOfWork, job: jobs.Job) -> None:
    """A handler that writes one row through its unit of work."""
    uow.connection.execute(
        sa.insert(job_effects).values(
            job_id=job.id, attempt=job.attempts, worker=job.locked_by or ""
        )
    )


def _enqueue(
    engine: Engine, kind: str, tenant: str, count: int = 1, **options: object
) -> list[uuid.UUID]:
    with engine.begin() as conn:
        batch = [
            jobs.NewJob(kind=kind, payload={"i": i}, tenant=tenant, **options)  # type: ignore[arg-type]
            for i in range(count)
        ]
        return [r.job_id for r in jobs.enqueue_many(conn, batch)]


def _state_of(engine: Engine, job_id: uuid.UUID) -> jobs.Job:
    with engine.connect() as conn:
        return jobs.get(conn, job_id)


def _all_done(engine: Engine, kind: str, total: int) -> Callable[[], bool]:
    def check() -> bool:
        with engine.connect() as conn:
            return count_jobs(conn, kind, "done") == total

    return check


def test_worker_commits_the_handlers_writes_with_the_completion(
    engine: Engine, effects: str, kind: str, handler_style: str
) -> None:
    ids = _enqueue(engine, kind, effects, count=20)
    with jobs.Worker(
        engine,
        {kind: styled(handler_style, record_effect)},
        jobs.WorkerConfig(concurrency=3, poll_seconds=0.2),
    ):
        wait_for(_all_done(engine, kind, 20))
    for job_id in ids:
        assert count_effects(engine, effects, job_id) == 1
        assert _state_of(engine, job_id).attempts == 1


@pytest.mark.parametrize(
    "layer",
    [(dms.DocumentWorker, UnitOfWork), (jobs.Worker, TenantTransaction)],
    ids=["dms.DocumentWorker", "dms.jobs.Worker"],
)
def test_without_a_factory_handlers_get_their_layers_unit_of_work(
    engine: Engine,
    effects: str,
    kind: str,
    layer: tuple[type[jobs.Worker[Any]], type],
    handler_style: str,
) -> None:
    """dms.DocumentWorker gives the tenant UnitOfWork (repositories), dms.jobs.Worker a bare
    transaction; an async def handler gets either bridged (dms.aio.AsyncUnitOfWork,
    AsyncTenantTransaction) over the same synchronous unit."""
    worker_class, unit_class = layer
    (job_id,) = _enqueue(engine, kind, effects)
    seen: list[object] = []

    def record(uow: Any, job: jobs.Job) -> None:
        seen.append(uow)
        record_effect(uow, job)

    async def bridged(uow: Any, job: jobs.Job) -> None:
        seen.append(uow)
        await uow.run(record, job)

    handler: Any = record if handler_style == "thread" else bridged
    expected = [unit_class] if handler_style == "thread" else [ASYNC_UNITS[unit_class], unit_class]
    with worker_class(engine, {kind: handler}, jobs.WorkerConfig(poll_seconds=0.1)):
        wait_for(_all_done(engine, kind, 1))
    assert [type(unit) for unit in seen] == expected
    assert getattr(seen[0], "tenant", None) == effects
    assert count_effects(engine, effects, job_id) == 1


def test_a_failing_handler_is_retried_with_its_traceback_recorded(
    engine: Engine, effects: str, kind: str, handler_style: str
) -> None:
    (job_id,) = _enqueue(engine, kind, effects, max_attempts=2)

    def flaky(uow: JobUnitOfWork, job: jobs.Job) -> None:
        record_effect(uow, job)  # rolled back with the failed attempt
        if job.attempts == 1:
            raise ValueError("document is locked")

    worker = jobs.Worker(
        engine,
        {kind: styled(handler_style, flaky)},
        jobs.WorkerConfig(poll_seconds=0.1, backoff={kind: FAST_RETRY}),
    )
    with worker:
        wait_for(_all_done(engine, kind, 1))
    job = _state_of(engine, job_id)
    assert job.attempts == 2
    assert job.last_error is not None
    assert job.last_error.startswith("Traceback")
    assert job.last_error.endswith("ValueError: document is locked")
    assert [e["error"] for e in job.errors] == ["ValueError: document is locked"]
    assert count_effects(engine, effects, job_id) == 1


def test_a_permanent_failure_goes_dead_at_once_with_its_writes_rolled_back(
    engine: Engine, effects: str, kind: str, handler_style: str
) -> None:
    (job_id,) = _enqueue(engine, kind, effects, max_attempts=5)

    def hopeless(uow: JobUnitOfWork, job: jobs.Job) -> None:
        record_effect(uow, job)
        raise dms.errors.PermanentFailure("the file is encrypted")

    worker = jobs.Worker(
        engine,
        {kind: styled(handler_style, hopeless)},
        jobs.WorkerConfig(poll_seconds=0.1, backoff={kind: FAST_RETRY}),
    )
    with worker:
        wait_for(lambda: _state_of(engine, job_id).state is jobs.JobState.DEAD)
    job = _state_of(engine, job_id)
    assert job.attempts == 1
    assert job.last_error is not None
    assert job.last_error.endswith("PermanentFailure: the file is encrypted")
    assert count_effects(engine, effects, job_id) == 0


class _BadPayload(ValidationError):
    """A ValidationError of an application's own."""


@pytest.mark.parametrize(
    "error",
    [ValidationError("title must not be blank: ''"), _BadPayload("payload has no revision_id")],
    ids=["ValidationError", "subclass"],
)
def test_a_validation_error_goes_dead_at_once_with_its_message_and_writes_rolled_back(
    engine: Engine, effects: str, kind: str, handler_style: str, error: ValidationError
) -> None:
    """Bad input never becomes good by waiting: no retries, as a PermanentFailure."""
    (job_id,) = _enqueue(engine, kind, effects, max_attempts=5)

    def refused(uow: JobUnitOfWork, job: jobs.Job) -> None:
        record_effect(uow, job)
        raise error

    worker = jobs.Worker(
        engine,
        {kind: styled(handler_style, refused)},
        jobs.WorkerConfig(poll_seconds=0.1, backoff={kind: FAST_RETRY}),
    )
    with worker:
        wait_for(lambda: _state_of(engine, job_id).state is jobs.JobState.DEAD)
    job = _state_of(engine, job_id)
    assert job.attempts == 1
    assert job.last_error is not None
    assert job.last_error.endswith(f"{type(error).__name__}: {error}")
    assert count_effects(engine, effects, job_id) == 0


def test_a_handler_whose_lease_was_taken_has_its_writes_rolled_back_with_the_completion(
    engine: Engine, effects: str, kind: str, handler_style: str
) -> None:
    """Exactly-once effects: another worker took the job while its handler ran (as a reclaim
    would), so the fenced completion fails and the handler's writes go with it."""
    (job_id,) = _enqueue(engine, kind, effects)

    def overtaken(uow: JobUnitOfWork, job: jobs.Job) -> None:
        record_effect(uow, job)
        with engine.begin() as conn:  # another transaction: the job is someone else's now
            conn.execute(
                sa.update(processing_jobs)
                .where(processing_jobs.c.id == job.id)
                .values(locked_by="another-worker")
            )

    worker = jobs.Worker(
        engine, {kind: styled(handler_style, overtaken)}, jobs.WorkerConfig(poll_seconds=0.1)
    )
    with worker:
        wait_for(lambda: worker.stats().lost == 1)
    job = _state_of(engine, job_id)
    assert (job.state, job.locked_by) == (jobs.JobState.RUNNING, "another-worker")
    assert count_effects(engine, effects, job_id) == 0
    assert worker.stats().completed == 0


def _nothing(transaction: object, job: jobs.Job, /) -> None:
    """A handler with no effect."""


def test_a_kind_without_handler_is_refused_and_its_jobs_wait_for_a_worker_that_has_one(
    engine: Engine, tenant: str, kind: str
) -> None:
    unknown = f"{kind}.unknown"
    (job_id,) = _enqueue(engine, unknown, tenant)

    with pytest.raises(ValidationError, match=rf"no handler for job kind\(s\) {unknown} "):
        jobs.Worker(engine, {kind: _nothing}, jobs.WorkerConfig(kinds=[kind, unknown]))
    with jobs.Worker(engine, {kind: _nothing}, jobs.WorkerConfig(poll_seconds=0.05)):
        (handled,) = _enqueue(engine, kind, tenant)  # after the unknown one: claimed past it
        wait_for(lambda: _state_of(engine, handled).state is jobs.JobState.DONE)
    waiting = _state_of(engine, job_id)
    with jobs.Worker(engine, {unknown: _nothing}, jobs.WorkerConfig(poll_seconds=0.05)):
        wait_for(lambda: _state_of(engine, job_id).state is jobs.JobState.DONE)

    assert (waiting.state, waiting.attempts) == (jobs.JobState.QUEUED, 0)


def test_bad_worker_settings_are_refused() -> None:
    engine = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    with pytest.raises(ValidationError):
        jobs.Worker(engine, {"k": record_effect}, jobs.WorkerConfig(concurrency=0))
    with pytest.raises(ValidationError):
        jobs.Worker(engine, {})
    with pytest.raises(ValidationError):
        jobs.Worker(engine, {"k": record_effect}, jobs.WorkerConfig(lease=timedelta(0)))
    with pytest.raises(ValidationError):
        jobs.Worker(engine, {"k": record_effect}, jobs.WorkerConfig(lease=MAX_LEASE * 2))
    engine.dispose()


class _Claims:
    """When ``engine`` ran a claim (a statement with ``SKIP LOCKED``), as seen by the driver."""

    def __init__(self, engine: Engine) -> None:
        self.times: list[float] = []
        self._engine = engine
        sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *args: Any) -> None:
        if "SKIP LOCKED" in args[2]:
            self.times.append(time.monotonic())

    def idle_for(self, seconds: float) -> bool:
        """Whether a claim ran, and none in the last ``seconds``."""
        return bool(self.times) and time.monotonic() - self.times[-1] > seconds

    def close(self) -> None:
        sa.event.remove(self._engine, "before_cursor_execute", self._seen)


def test_notify_wakes_an_idle_worker_long_before_its_poll(
    engine: Engine, database_url: URL, effects: str, kind: str
) -> None:
    # The worker's own engine, so that only its claims are counted.
    own = sa.create_engine(database_url, poolclass=sa.NullPool)
    claims = _Claims(own)
    try:
        with jobs.Worker(own, {kind: record_effect}, jobs.WorkerConfig(poll_seconds=120)):
            # Idle, observed: it has claimed and found nothing, and sleeps until its poll.
            wait_for(lambda: claims.idle_for(0.5), timeout=30)
            (job_id,) = _enqueue(own, kind, effects)
            wait_for(_all_done(own, kind, 1), timeout=30)
    finally:
        claims.close()
        own.dispose()
    assert count_effects(engine, effects, job_id) == 1


def _listening(engine: Engine) -> int:
    """Sessions of this database whose last statement was a LISTEN."""
    activity = sa.table(
        "pg_stat_activity", sa.column("datname"), sa.column("query"), schema="pg_catalog"
    )
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(
                    activity.c.datname == sa.func.current_database(),
                    activity.c.query.startswith("LISTEN"),
                )
            ).scalar_one()
        )


@pytest.mark.parametrize("listen", [False, True])
def test_polling_works_without_listen(
    engine: Engine, effects: str, kind: str, listen: bool
) -> None:
    before = _listening(engine)
    with jobs.Worker(
        engine, {kind: record_effect}, jobs.WorkerConfig(poll_seconds=0.1, listen=listen)
    ):
        _enqueue(engine, kind, effects, count=3)
        wait_for(_all_done(engine, kind, 3))
        listening = _listening(engine) - before

    # With listen=True (the control), the worker's listener shows up: the check can fail.
    assert listening == (1 if listen else 0)


def test_stop_finishes_short_jobs_and_releases_the_rest(
    engine: Engine, effects: str, kind: str
) -> None:
    release_slow = threading.Event()
    slow_finished = threading.Event()

    def handler(uow: JobUnitOfWork, job: jobs.Job) -> None:
        if job.payload["i"] == 0:
            release_slow.wait(timeout=30)
            record_effect(uow, job)
            slow_finished.set()
        else:
            time.sleep(0.3)
            record_effect(uow, job)

    slow, fast = _enqueue(engine, kind, effects, count=2)
    worker = jobs.Worker(
        engine, {kind: handler}, jobs.WorkerConfig(concurrency=2, poll_seconds=0.1)
    )
    worker.start()
    wait_for(lambda: len(worker.running_jobs) == 2)
    worker.stop(grace_seconds=2.0)
    released = _state_of(engine, slow)
    assert (released.state, released.attempts) == (jobs.JobState.QUEUED, 0)
    assert _state_of(engine, fast).state is jobs.JobState.DONE
    release_slow.set()  # the overrunning handler finishes: its completion is fenced off
    assert slow_finished.wait(timeout=10)
    assert worker.join(timeout=10)
    assert _state_of(engine, slow).state is jobs.JobState.QUEUED
    assert count_effects(engine, effects, slow) == 0
    assert count_effects(engine, effects, fast) == 1


@pytest.mark.slow
def test_a_worker_whose_connections_are_terminated_keeps_going(
    engine: Engine,
    effects: str,
    kind: str,
    fresh_engine: Callable[..., Engine],
    handler_style: str,
) -> None:
    app = f"dms-test-{uuid.uuid4().hex[:8]}"
    worker_engine = fresh_engine(application_name=app, pool_pre_ping=True)
    total = 60

    def handler(uow: JobUnitOfWork, job: jobs.Job) -> None:
        time.sleep(0.02)
        record_effect(uow, job)

    ids = _enqueue(engine, kind, effects, count=total)
    terminate = (
        sa.select(sa.func.pg_terminate_backend(sa.column("pid")))
        .select_from(sa.table("pg_stat_activity", sa.column("pid"), sa.column("application_name")))
        .where(sa.column("application_name") == app)
    )
    killed = 0
    worker = jobs.Worker(
        worker_engine,
        {kind: styled(handler_style, handler)},
        jobs.WorkerConfig(concurrency=2, poll_seconds=0.2, backoff={kind: FAST_RETRY}),
    )
    with worker:
        for _ in range(4):
            time.sleep(0.3)
            with engine.connect() as conn:
                killed += len(conn.execute(terminate).all())
        wait_for(_all_done(engine, kind, total), timeout=60)
    assert killed > 0
    for job_id in ids:
        assert count_effects(engine, effects, job_id) == 1
    with engine.connect() as conn:
        assert count_jobs(conn, kind, "done") == total
        final = [jobs.get(conn, job_id) for job_id in ids]
    # A lost connection is not the job's failure: nothing was recorded against any job.
    assert [j.errors for j in final if j.errors] == []


def test_workers_of_slow_jobs_share_them_instead_of_one_claiming_them_all(
    engine: Engine, tenant: str, kind: str
) -> None:
    # Slow jobs must stay in the queue for other workers: the claim-ahead window follows the
    # pace at which jobs finish, not the prefetch ceiling (1,000 here, which would let the first
    # worker to hear of the jobs claim all of them). Both workers wait before the jobs come, so
    # neither has a head start; how many each runs depends on the machine's load, but a window
    # of a few jobs per runner leaves each of them about half.
    def slow(uow: JobUnitOfWork, job: jobs.Job) -> None:
        time.sleep(0.05)

    total = 120
    first = jobs.Worker(
        engine, {kind: slow}, jobs.WorkerConfig(concurrency=2, prefetch=1000, poll_seconds=0.2)
    )
    second = jobs.Worker(
        engine, {kind: slow}, jobs.WorkerConfig(concurrency=2, prefetch=1000, poll_seconds=0.2)
    )
    with first, second:
        _enqueue(engine, kind, tenant, count=total)
        wait_for(_all_done(engine, kind, total))
    shares = [first.stats().completed, second.stats().completed]
    assert sum(shares) == total
    assert min(shares) >= total // 4, shares


def _claims_of(engine: Engine, kind: str) -> int:
    """How many claim statements took the jobs of ``kind``: counted in the database.

    A claim stamps every job it takes with its transaction's ``now()`` as ``started_at``, so
    distinct stamps are distinct claims, whichever path the claim took (the worker's claim runs
    in psycopg's pipeline mode, which SQLAlchemy's events never see).
    """
    query = sa.select(sa.func.count(sa.distinct(processing_jobs.c.started_at))).where(
        processing_jobs.c.kind == kind
    )
    with engine.connect() as conn:
        return int(conn.scalar(query) or 0)


def test_a_worker_of_fast_jobs_claims_in_large_batches(
    engine: Engine, tenant: str, kind: str
) -> None:
    _enqueue(engine, kind, tenant, count=3000)
    with jobs.Worker(engine, {kind: lambda uow, job: None}, jobs.WorkerConfig(concurrency=4)):
        wait_for(_all_done(engine, kind, 3000))
    # One claim per job at the start, growing as the pace is measured: far fewer than 3,000.
    assert _claims_of(engine, kind) < 100


def test_the_claim_count_sees_every_claim_of_a_worker_claiming_one_at_a_time(
    engine: Engine, tenant: str, kind: str
) -> None:
    """Control of the test above: with batches of one job, one claim per job is counted."""
    _enqueue(engine, kind, tenant, count=200)
    with jobs.Worker(
        engine, {kind: lambda uow, job: None}, jobs.WorkerConfig(concurrency=4, batch_size=1)
    ):
        wait_for(_all_done(engine, kind, 200))
    assert _claims_of(engine, kind) >= 190  # two claims might share a microsecond, no more


def test_a_handler_whose_connection_cannot_be_made_has_its_job_released_not_failed(
    engine: Engine, tenant: str, kind: str, handler_style: str
) -> None:
    """A connection that a pool opens to replace a dead one can be cut while it connects
    (CI saw it under pg_terminate_backend): DatabaseUnreachable, which is not the job's
    failure. Here the handler's units connect to a port where nothing listens."""
    (job_id,) = _enqueue(engine, kind, tenant)
    nowhere = engine.url.set(host="127.0.0.1", port=1, query={})
    dead = dms.create_engine(nowhere)
    factory: Any = (
        TenantTransaction.factory(dead)
        if handler_style == "thread"
        else lambda _: AsyncTenantTransaction.factory(dms.create_async_engine(nowhere))
    )
    worker = jobs.Worker(
        engine,
        {kind: styled(handler_style, record_effect)},
        jobs.WorkerConfig(poll_seconds=0.1),
        unit_of_work=factory,
    )
    with worker:
        wait_for(lambda: worker.stats().released >= 1)
    dead.dispose()
    job = _state_of(engine, job_id)
    assert (job.errors, worker.stats().failed) == ((), 0)
