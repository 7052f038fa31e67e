"""Real child processes: killed with SIGKILL mid-job, or stopped with SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs
from dms.jobs.worker import JobUnitOfWork
from tests.jobs.conftest import count_effects, job_effects, wait_for

REPO = Path(__file__).resolve().parents[2]


def _child(mode: str, engine: Engine, kind: str) -> subprocess.Popen[bytes]:
    url = engine.url.render_as_string(hide_password=False)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.jobs.child_worker", mode, url, kind], cwd=REPO
    )


def _job(engine: Engine, job_id: uuid.UUID) -> jobs.Job:
    with engine.connect() as conn:
        return jobs.get(conn, job_id)


@pytest.mark.slow
def test_job_of_a_killed_worker_is_completed_once_by_another(
    engine: Engine, effects: str, kind: str
) -> None:
    with engine.begin() as conn:
        job_id, _ = jobs.enqueue(conn, kind, {}, tenant=effects)
    child = _child("crash", engine, kind)
    assert child.wait(timeout=60) == -signal.SIGKILL
    orphan = _job(engine, job_id)
    assert (orphan.state, orphan.attempts) == (jobs.JobState.RUNNING, 1)
    assert count_effects(engine, effects, job_id) == 0  # the dead worker's write never committed

    def survivor(uow: JobUnitOfWork, job: jobs.Job) -> None:
        uow.connection.execute(
            sa.insert(job_effects).values(job_id=job.id, attempt=job.attempts, worker="survivor")
        )

    with jobs.Worker(engine, {kind: survivor}, jobs.WorkerConfig(poll_seconds=0.1)):
        wait_for(lambda: _job(engine, job_id).state is jobs.JobState.DONE, timeout=30)
    done = _job(engine, job_id)
    assert done.attempts == 2
    assert done.errors[0]["error"].startswith("lease of worker ")
    assert count_effects(engine, effects, job_id) == 1


@pytest.mark.slow
def test_sigterm_stops_the_worker_and_releases_its_job(
    engine: Engine, effects: str, kind: str
) -> None:
    with engine.begin() as conn:
        job_id, _ = jobs.enqueue(conn, kind, {}, tenant=effects)
    child = _child("serve", engine, kind)
    try:
        wait_for(lambda: _job(engine, job_id).state is jobs.JobState.RUNNING, timeout=30)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
    released = _job(engine, job_id)
    assert (released.state, released.attempts) == (jobs.JobState.QUEUED, 0)
    assert released.lease_expires_at is None
    assert count_effects(engine, effects, job_id) == 0
    with engine.begin() as conn:  # and it is immediately claimable again
        (again,) = jobs.dequeue(conn, "next", kinds=[kind], lease=timedelta(seconds=5))
    assert (again.id, again.attempts) == (job_id, 1)
