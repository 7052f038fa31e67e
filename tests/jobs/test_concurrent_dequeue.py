"""Many threads dequeuing over many jobs: every job completed exactly once, none claimed twice.

How fast is bench/jobs' question (a test asserts no timing); this one asks that the threads
really overlapped: the claims are spread over them, not all taken by the first to start.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs
from dms.jobs.tables import processing_jobs

JOBS = 5000
THREADS = 8
BATCH = 10
ENQUEUE_CHUNK = 1000  # a statement carries at most 65,535 parameters


@pytest.mark.slow
def test_eight_threads_complete_five_thousand_jobs_exactly_once(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        for start in range(0, JOBS, ENQUEUE_CHUNK):
            batch = [
                jobs.NewJob(kind=kind, payload={"n": n}, tenant=tenant)
                for n in range(start, start + ENQUEUE_CHUNK)
            ]
            jobs.enqueue_many(conn, batch)
    claims: list[tuple[uuid.UUID, int]] = []
    claimers: set[str] = set()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(worker_id: str) -> None:
        try:
            while True:
                with engine.begin() as conn:
                    claimed = jobs.dequeue(
                        conn, worker_id, kinds=[kind], limit=BATCH, lease=timedelta(minutes=5)
                    )
                if not claimed:
                    return
                with lock:
                    claims.extend((job.id, job.attempts) for job in claimed)
                    claimers.add(worker_id)
                with engine.begin() as conn:
                    for job in claimed:
                        jobs.complete(conn, job)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert len(claims) == JOBS  # nothing claimed twice
    assert len({job_id for job_id, _ in claims}) == JOBS
    assert {attempts for _, attempts in claims} == {1}
    assert len(claimers) > 1  # 500 claims of 10: one thread alone would mean no concurrency
    with engine.connect() as conn:
        counts = conn.execute(
            sa.select(processing_jobs.c.state, sa.func.count())
            .where(processing_jobs.c.kind == kind)
            .group_by(processing_jobs.c.state)
        )
        states = {state: count for state, count in counts}
    assert states == {"done": JOBS}
