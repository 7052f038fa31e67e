"""dms.jobs: enqueue, processing with its Worker, latency, and the 1,000,000-finished-rows table."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from bench.jobs.common import DRAIN_CHECK_SECONDS, LATENCY_RATE_PER_SECOND, rate, timed
from dms import jobs, migrations, provisioning
from dms.jobs.tables import processing_jobs
from dms.jobs.worker import JobUnitOfWork
from dms.users import create_users_stand_in

TENANT = "bench"
_LONG_LEASE = timedelta(minutes=5)


class ExactlyOnce:
    """Handler runs per job id, and the jobs checked so far."""

    def __init__(self) -> None:
        self.runs: list[uuid.UUID] = []
        self.checked = 0
        self.failures: list[str] = []

    def check(self, engine: Engine, kind: str, expected: int) -> None:
        """Every job of ``kind`` ran once, is done, on its first attempt; nothing else ran."""
        runs = Counter(self.runs)
        self.runs.clear()
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    processing_jobs.c.id, processing_jobs.c.state, processing_jobs.c.attempts
                ).where(processing_jobs.c.kind == kind)
            ).all()
        problems = [f"{kind}: {expected} jobs enqueued, {len(rows)} in the table"]
        problems = problems if len(rows) != expected else []
        problems += [
            f"{kind}: job {i} is {s} after {a} attempts"
            for i, s, a in rows
            if (s, a) != ("done", 1)
        ]
        problems += [f"{kind}: job {i} ran {n} times" for i, n in runs.items() if n != 1]
        if set(runs) != {i for i, _, _ in rows}:
            problems.append(f"{kind}: handler runs and table rows differ")
        self.failures += problems[:5]
        self.checked += len(rows)


def prepare(url: URL) -> Engine:
    """Migrate the database and register the tenant."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenant(engine, TENANT)
    engine.dispose()
    return worker_engine(url, 8)


def worker_engine(url: URL, concurrency: int) -> Engine:
    """An engine sized and configured as docs/jobs.md recommends for a worker."""
    return sa.create_engine(url, pool_size=concurrency + 4, pool_pre_ping=True)


def enqueue_single(engine: Engine, count: int) -> float:
    """Jobs/s enqueueing one job per call, each call its own transaction (autocommit).

    On one held connection, as pgqueuer's benchmark holds its connection: one call is one
    statement, so autocommit makes it one transaction, as pgqueuer's implicit ones.
    """
    kind = f"bench.enqueue.{uuid.uuid4().hex[:8]}"

    def run() -> None:
        with _autocommit(engine) as conn:
            for n in range(count):
                jobs.enqueue(conn, kind, {"n": n}, tenant=TENANT)

    seconds = timed(run)
    delete_kind(engine, kind)
    return rate(count, seconds)


def enqueue_batches(engine: Engine, batches: int, size: int) -> float:
    """Jobs/s enqueueing ``size`` jobs per call (``enqueue_many``), each call its own transaction.

    The jobs are built (and validated) inside the timed loop, as a caller would.
    """
    kind = f"bench.enqueue.{uuid.uuid4().hex[:8]}"

    def run() -> None:
        with _autocommit(engine) as conn:
            for b in range(batches):
                batch = [
                    jobs.NewJob(kind=kind, payload={"n": b * size + n}, tenant=TENANT)
                    for n in range(size)
                ]
                jobs.enqueue_many(conn, batch)

    seconds = timed(run)
    delete_kind(engine, kind)
    return rate(batches * size, seconds)


def _autocommit(engine: Engine) -> Connection:
    return engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def delete_kind(engine: Engine, kind: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.delete(processing_jobs).where(processing_jobs.c.kind == kind))


def fill(engine: Engine, kind: str, count: int) -> None:
    """Enqueue ``count`` jobs of ``kind`` (setup, not measured)."""
    for start in range(0, count, 5000):
        batch = [
            jobs.NewJob(kind=kind, payload={"n": n}, tenant=TENANT)
            for n in range(start, min(count, start + 5000))
        ]
        with engine.begin() as conn:
            jobs.enqueue_many(conn, batch)


def vacuum(engine: Engine) -> None:
    """``VACUUM ANALYZE`` the queue before a measured run, as autovacuum would have since the last.

    Autovacuum is off on the bench machine's server, and every job leaves index entries dead
    once it moved on, which every later claim would walk: each run would measure the runs
    before it. The pgbench bound's database and pgqueuer's get the same.
    """
    with _autocommit(engine) as conn:
        conn.exec_driver_sql("VACUUM ANALYZE dms.processing_jobs")


def _pending(engine: Engine, kind: str) -> bool:
    # One EXISTS per state, so that each is served by its partial index (queued rows, running
    # rows) however many finished rows the table holds. A single `state IN (...)` matches
    # neither index's predicate: with 1,000,000 finished rows it was a parallel sequential scan
    # (60 ms, three processes) every DRAIN_CHECK_SECONDS, competing with the measured worker.
    query = sa.select(
        sa.or_(
            *(
                sa.exists().where(processing_jobs.c.kind == kind, processing_jobs.c.state == state)
                for state in ("queued", "running")
            )
        )
    )
    with engine.connect() as conn:
        return bool(conn.scalar(query))


def process(url: URL, probe: Engine, count: int, concurrency: int, ledger: ExactlyOnce) -> float:
    """Jobs/s of a ``Worker`` over ``count`` queued no-op jobs, from start until none is left."""
    kind = f"bench.noop.{uuid.uuid4().hex[:8]}"
    fill(probe, kind, count)
    vacuum(probe)
    engine = worker_engine(url, concurrency)
    runs = ledger.runs

    def noop(uow: JobUnitOfWork, job: jobs.Job) -> None:
        runs.append(job.id)

    worker = jobs.Worker(
        engine, {kind: noop}, jobs.WorkerConfig(concurrency=concurrency, lease=_LONG_LEASE)
    )
    before = len(runs)
    started = time.perf_counter()
    worker.start()
    # No query while the handlers run: 200 checks a second cost the server 10 % of a core,
    # taken from the worker being measured. Then the last completions are waited for.
    while len(runs) - before < count:
        time.sleep(DRAIN_CHECK_SECONDS)
    while _pending(probe, kind):
        time.sleep(DRAIN_CHECK_SECONDS)
    seconds = time.perf_counter() - started
    worker.stop()
    engine.dispose()
    ledger.check(probe, kind, count)
    return rate(count, seconds)


def latency(
    url: URL, probe: Engine, count: int, concurrency: int, ledger: ExactlyOnce
) -> list[float]:
    """Milliseconds from enqueue (commit) to the handler's start, at 100 jobs/s offered."""
    kind = f"bench.latency.{uuid.uuid4().hex[:8]}"
    engine = worker_engine(url, concurrency)
    samples: list[float] = []
    lock = threading.Lock()
    sent: dict[str, float] = {}
    runs = ledger.runs

    def note(uow: JobUnitOfWork, job: jobs.Job) -> None:
        now = time.perf_counter()
        runs.append(job.id)
        with lock:
            samples.append((now - sent[job.payload["k"]]) * 1000)

    with jobs.Worker(
        engine, {kind: note}, jobs.WorkerConfig(concurrency=concurrency, lease=_LONG_LEASE)
    ):
        time.sleep(0.5)  # idle workers
        interval = 1 / LATENCY_RATE_PER_SECOND
        next_at = time.perf_counter()
        for n in range(count):
            time.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += interval
            key = str(n)
            with probe.begin() as conn:
                jobs.enqueue(conn, kind, {"k": key}, tenant=TENANT)
                sent[key] = time.perf_counter()  # the commit follows: counted from here
        while _pending(probe, kind):
            time.sleep(DRAIN_CHECK_SECONDS)
    engine.dispose()
    ledger.check(probe, kind, count)
    return samples


def load_finished_rows(engine: Engine, rows: int) -> None:
    """``rows`` finished jobs (90 % done, 10 % dead), in one INSERT ... SELECT generate_series."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            """
            INSERT INTO dms.processing_jobs
                (tenant, kind, payload, state, attempts, max_attempts, run_at, locked_by,
                 last_error, created_at, started_at, finished_at)
            SELECT %(tenant)s, 'bench.history', jsonb_build_object('n', n),
                   CASE WHEN n %% 10 = 0 THEN 'dead' ELSE 'done' END,
                   1, 1, now() - interval '1 day', 'bench-history',
                   CASE WHEN n %% 10 = 0 THEN 'failed' END,
                   now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
            FROM generate_series(1, %(rows)s) AS n
            """,
            {"tenant": TENANT, "rows": rows},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE dms.processing_jobs")
