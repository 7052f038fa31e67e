"""Supervision: failures that cannot be recorded as usual end no thread and hold no job.

Issue 10, bug 2: an error text PostgreSQL cannot store, or a backoff that cannot be computed,
used to kill the runner; the worker then held its claimed-ahead jobs forever. Each test
checks that the job's failure is recorded, that no runner is lost (the worker's own stats),
and that the worker goes on processing.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from sqlalchemy.engine import Engine

from dms import jobs
from dms.jobs._rows import Claimed
from dms.jobs.pipeline import claim_outcome
from dms.jobs.worker import JobUnitOfWork
from dms.metrics import WorkerCollector, registry_for
from tests.jobs.conftest import count_effects, count_jobs, job_effects, wait_for

FAST_RETRY = jobs.Backoff(initial_seconds=0, step_seconds=0, maximum_seconds=0)


@dataclass(frozen=True, kw_only=True)
class BrokenBackoff(jobs.Backoff):
    """A policy whose delay cannot be computed, as a huge one could not before issue 10."""

    def delay(self, failure: int) -> timedelta:
        """Overflow, as ``timedelta(seconds=1e15)`` did."""
        raise OverflowError("date value out of range")


def _record_effect(uow: JobUnitOfWork, job: jobs.Job) -> None:
    uow.connection.execute(
        sa.insert(job_effects).values(job_id=job.id, attempt=job.attempts, worker="w")
    )


def _enqueue(
    engine: Engine, kind: str, tenant: str, payloads: list[dict[str, str]]
) -> list[uuid.UUID]:
    with engine.begin() as conn:
        batch = [
            jobs.NewJob(kind=kind, payload=payload, tenant=tenant, max_attempts=1)
            for payload in payloads
        ]
        return [result.job_id for result in jobs.enqueue_many(conn, batch)]


def _job(engine: Engine, job_id: uuid.UUID) -> jobs.Job:
    with engine.connect() as conn:
        return jobs.get(conn, job_id)


def _finished(engine: Engine, job_id: uuid.UUID) -> bool:
    return _job(engine, job_id).state in (jobs.JobState.DONE, jobs.JobState.DEAD)


def _fail_with(message: str) -> jobs.Handler[JobUnitOfWork]:
    def handler(uow: JobUnitOfWork, job: jobs.Job) -> None:
        if job.payload.get("fail"):
            _record_effect(uow, job)  # rolled back with the failed attempt
            raise ValueError(message)
        _record_effect(uow, job)

    return handler


SURROGATE_NAME = b"scan-\xff.pdf".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    "message",
    [f"cannot read {SURROGATE_NAME}", "cannot read a\x00b", "x" * 3_000_000],
    ids=["lone surrogate", "NUL", "3 MB"],
)
def test_a_failure_whose_text_postgresql_refuses_is_recorded_and_no_runner_is_lost(
    engine: Engine,
    effects: str,
    kind: str,
    message: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dms.jobs")
    failing, *others = _enqueue(engine, kind, effects, [{"fail": "yes"}, {}, {}, {}])
    worker = jobs.Worker(
        engine, {kind: _fail_with(message)}, jobs.WorkerConfig(concurrency=2, poll_seconds=0.1)
    )
    with worker:
        wait_for(lambda: all(_finished(engine, job_id) for job_id in [failing, *others]))
        # A finished job's claim leaves the book just after its commit: wait for the book.
        wait_for(lambda: worker.stats().held == 0)
        stats = worker.stats()
    # The log line says what failed in text any log pipeline can carry: escaped, and short.
    (line,) = [r.getMessage() for r in caplog.records if str(failing) in r.getMessage()]
    assert "cannot read" in line or "xxxx" in line
    assert line.encode("utf-8")
    assert "\x00" not in line
    assert len(line) < 2_000
    dead = _job(engine, failing)
    assert dead.state is jobs.JobState.DEAD
    assert dead.last_error is not None
    assert "cannot read" in dead.last_error or "x" * 100 in dead.last_error
    assert count_effects(engine, effects, failing) == 0
    assert all(count_effects(engine, effects, job_id) == 1 for job_id in others)
    assert (stats.runners_alive, stats.held) == (2, 0)
    assert stats.abandoned == 0


def test_a_runner_whose_failure_cannot_be_recorded_is_replaced_and_the_job_failed(
    engine: Engine, effects: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    failing, *others = _enqueue(engine, kind, effects, [{"fail": "yes"}, {}, {}])
    worker = jobs.Worker(
        engine,
        {kind: _fail_with("document is locked")},
        jobs.WorkerConfig(concurrency=2, poll_seconds=0.1, backoff={kind: BrokenBackoff()}),
    )
    with worker:
        wait_for(lambda: all(_finished(engine, job_id) for job_id in [failing, *others]))
        # A finished job's claim leaves the book just after its commit (a CI run under load
        # read held=1 here): wait for the book and the replaced runner.
        wait_for(lambda: _alive_and_held(worker) == (2, 0))
        stats = worker.stats()
        (later,) = _enqueue(engine, kind, effects, [{}])  # the worker still works
        wait_for(lambda: _finished(engine, later))
    dead = _job(engine, failing)
    assert dead.state is jobs.JobState.DEAD  # max_attempts=1: the attempt was recorded
    assert dead.last_error is not None
    assert "OverflowError" in dead.last_error
    assert (stats.runners_replaced, stats.runners_alive, stats.held) == (1, 2, 0)
    assert "runner" in caplog.text
    assert "Traceback" in caplog.text
    assert count_effects(engine, effects, later) == 1


def test_a_failed_attempt_is_logged_at_warning_with_job_kind_tenant_and_error(
    engine: Engine, effects: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    (job_id,) = _enqueue(engine, kind, effects, [{"fail": "yes"}])
    caplog.set_level(logging.WARNING, logger="dms.jobs")
    with jobs.Worker(
        engine, {kind: _fail_with("document is locked")}, jobs.WorkerConfig(poll_seconds=0.1)
    ):
        wait_for(lambda: _finished(engine, job_id))
    (record,) = [r for r in caplog.records if "document is locked" in r.getMessage()]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert str(job_id) in message
    assert kind in message
    assert effects in message


def test_the_worker_stats_are_exported_as_metrics(engine: Engine, effects: str, kind: str) -> None:
    ids = _enqueue(engine, kind, effects, [{}, {}, {"fail": "yes"}])
    worker = jobs.Worker(
        engine,
        {kind: _fail_with("nope")},
        jobs.WorkerConfig(concurrency=3, poll_seconds=0.1, name="w-metrics"),
    )
    with worker:
        wait_for(lambda: all(_finished(engine, job_id) for job_id in ids))
        collector = WorkerCollector(worker.name, worker.stats)
        text = generate_latest(registry_for(engine, worker=collector)).decode()
    assert 'dms_worker_runners_alive{worker="w-metrics"} 3.0' in text
    assert 'dms_worker_runners_replaced_total{worker="w-metrics"} 0.0' in text
    assert 'dms_worker_jobs_total{outcome="completed",worker="w-metrics"} 2.0' in text
    assert 'dms_worker_jobs_total{outcome="failed",worker="w-metrics"} 1.0' in text


def test_jobs_claimed_ahead_are_released_at_once_when_the_worker_stops(
    engine: Engine, effects: str, kind: str
) -> None:
    """A slow job holds the only runner; the jobs claimed behind it go straight back.

    "At once" as an order, not a time: the slow handler, still running, waits until it is the
    only running job left, which happens only if the stop releases the others before the
    handler returns (a stop that waited for the runner first would leave it waiting in vain).
    """
    ids = _enqueue(engine, kind, effects, [{}] * 5)
    running = threading.Event()
    stopping = threading.Event()
    released_while_running: list[bool] = []

    def slow(uow: JobUnitOfWork, job: jobs.Job) -> None:
        _record_effect(uow, job)
        if running.is_set():  # the first job's handler is the one that watches
            return
        running.set()
        stopping.wait(timeout=30)
        with engine.connect() as conn:
            released_while_running.append(
                _eventually(lambda: count_jobs(conn, kind, "running") == 1, seconds=10)
            )

    worker = jobs.Worker(
        engine, {kind: slow}, jobs.WorkerConfig(poll_seconds=0.1, prefetch=10, grace_seconds=30)
    )
    with worker:
        # Held alone is not enough: all five can be held before the runner starts the first,
        # and a stop then releases them all with no handler left to watch.
        wait_for(lambda: running.is_set() and worker.stats().held >= 2)
        stopping.set()
    with engine.connect() as conn:
        assert count_jobs(conn, kind, "running") == 0
        assert count_jobs(conn, kind, "done") + count_jobs(conn, kind, "queued") == len(ids)
    assert released_while_running == [True]
    assert worker.stats().held == 0


def _eventually(condition: Callable[[], bool], *, seconds: float) -> bool:
    """Whether ``condition`` holds within ``seconds`` (polled): an outcome, not a failure."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _losing_first_claim(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the worker's first claim commit but lose its result, as a connection cut after
    ``COMMIT`` and before the reply does: the jobs are ``running`` under the worker's name and
    the worker does not know it holds them. Returns the number of jobs each lost claim took."""
    lost: list[int] = []

    def claim_then_lose(conn: sa.Connection, *args: object, **kwargs: object) -> Claimed:
        claimed = claim_outcome(conn, *args, **kwargs)  # type: ignore[arg-type]
        if lost or not claimed.jobs:
            return claimed
        lost.append(len(claimed.jobs))
        conn.invalidate()
        raise sa.exc.OperationalError("claim", {}, Exception("the connection is lost"))

    monkeypatch.setattr("dms.jobs.worker._claimer.claim_outcome", claim_then_lose)
    return lost


def test_jobs_of_a_claim_whose_reply_was_lost_are_released_not_held(
    engine: Engine, effects: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI fault: a terminated connection after the claim's COMMIT left its jobs running
    until their lease expired, recorded as a failed attempt they never made."""
    ids = _enqueue(engine, kind, effects, [{}] * 6)
    lost = _losing_first_claim(monkeypatch)
    # A lease longer than the wait: only a release, not its expiry, can finish the jobs.
    worker = jobs.Worker(
        engine,
        {kind: _record_effect},
        jobs.WorkerConfig(concurrency=2, poll_seconds=0.1, lease=timedelta(hours=1)),
    )
    with worker:
        wait_for(lambda: all(_finished(engine, job_id) for job_id in ids))
        stats = worker.stats()
    assert lost
    assert lost[0] > 0
    assert stats.released == lost[0]
    for job_id in ids:
        job = _job(engine, job_id)
        assert (job.state, job.attempts, job.errors) == (jobs.JobState.DONE, 1, ())
        assert count_effects(engine, effects, job_id) == 1


def _alive_and_held(worker: jobs.Worker[Any]) -> tuple[int, int]:
    stats = worker.stats()
    return stats.runners_alive, stats.held
