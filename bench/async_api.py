"""Benchmark: dms.aio (the greenlet bridge) against the synchronous API and raw psycopg async.

One run, one temporary database (dropped afterwards), one tenant:

* **units of work**: each adds a document and enqueues its job in one transaction, then
  commits. The async unit of work at 50 concurrent tasks (a pool of 50 connections) against
  the synchronous one at 8 threads (a pool of 8), units per second;
* **cost per statement**: a document read by id, one after another on one open transaction:
  ``await uow.documents.get(id)`` (dms.aio), ``uow.documents.get(id)`` (sync dms), and the same
  SQL text on psycopg's ``AsyncConnection`` with nothing around it, and the same Core statement on
  SQLAlchemy's ``AsyncConnection`` routed by ``schema_translate_map`` (no dms); p50 in
  microseconds;
* **handlers that wait on I/O**: jobs whose handler waits 10 ms (``await asyncio.sleep`` in an
  ``async def`` handler, ``time.sleep`` in a plain one), run by one ``dms.DocumentWorker`` from
  the first claim to the last completion: async handlers at concurrency 100 on one event loop
  against plain handlers on 8 runner threads, jobs per second.

    python -m bench.async_api [--database-url URL] [--units 3000] [--reads 3000] [--jobs 5000]
                              [--write]

Default: the machine's PostgreSQL 15 (127.0.0.1:5432). ``--write`` puts the results in
bench/results/async.md. Not a test: the machine is shared and timings are noisy; only the
ratios of one run mean something.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import dms
from dms import jobs, migrations, provisioning, tenancy
from dms.aio import AsyncUnitOfWork
from dms.aio import jobs as async_jobs
from dms.db import normalize_url
from dms.jobs.tables import processing_jobs
from dms.schema.tenant import documents
from dms.testing import temporary_database
from dms.uow import UnitOfWork
from dms.users import create_user, create_users_stand_in

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "async.md"
TENANT = "bench_async"
TASKS = 50
THREADS = 8
#: Jobs in flight on the async worker's event loop.
ASYNC_HANDLERS = 100
#: What each handler waits, in seconds: an HTTP call or an object store's answer.
HANDLER_IO_SECONDS = 0.010


def _setup(url: URL) -> uuid.UUID:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenant(engine, TENANT)
    with engine.begin() as conn:
        user = create_user(conn, email="bench@example.org", display_name="Bench")
    engine.dispose()
    return user


def _sync_units(url: URL, user: uuid.UUID, units: int) -> float:
    engine = dms.create_engine(url, pool_size=THREADS, max_overflow=0)
    counter = iter(range(units))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            with UnitOfWork(engine, tenant=TENANT, user_id=user) as uow:
                doc = uow.documents.add(title=f"sync {n}")
                jobs.enqueue(uow, "bench.async", {"d": str(doc.id)}, tenant=TENANT)
                uow.commit()

    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(work) for _ in range(THREADS)]:
            future.result()
    elapsed = time.perf_counter() - started
    engine.dispose()
    return units / elapsed


async def _async_units(url: URL, user: uuid.UUID, units: int) -> float:
    engine = dms.create_async_engine(url, pool_size=TASKS, max_overflow=0)
    counter = iter(range(units))

    async def work() -> None:
        for n in counter:  # tasks share the iterator: one event loop, no lock needed
            async with AsyncUnitOfWork(engine, tenant=TENANT, user_id=user) as uow:
                doc = await uow.documents.add(title=f"async {n}")
                await async_jobs.enqueue(uow, "bench.async", {"d": str(doc.id)}, tenant=TENANT)
                await uow.commit()

    started = time.perf_counter()
    await asyncio.gather(*(work() for _ in range(TASKS)))
    elapsed = time.perf_counter() - started
    await engine.dispose()
    return units / elapsed


def _p50_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def _sync_reads(url: URL, user: uuid.UUID, document_id: uuid.UUID, reads: int) -> float:
    engine = dms.create_engine(url)
    samples: list[float] = []
    with UnitOfWork(engine, tenant=TENANT, user_id=user) as uow:
        for _ in range(reads):
            started = time.perf_counter()
            uow.documents.get(document_id)
            samples.append(time.perf_counter() - started)
    engine.dispose()
    return _p50_us(samples)


async def _async_reads(url: URL, user: uuid.UUID, document_id: uuid.UUID, reads: int) -> float:
    engine: AsyncEngine = dms.create_async_engine(url)
    samples: list[float] = []
    async with AsyncUnitOfWork(engine, tenant=TENANT, user_id=user) as uow:
        for _ in range(reads):
            started = time.perf_counter()
            await uow.documents.get(document_id)
            samples.append(time.perf_counter() - started)
    await engine.dispose()
    return _p50_us(samples)


async def _sqlalchemy_reads(url: URL, document_id: uuid.UUID, reads: int) -> float:
    """The same read as a Core statement on SQLAlchemy's AsyncConnection, routed as dms routes
    (``schema_translate_map``), nothing of dms around it: the floor of any path through
    SQLAlchemy."""
    engine = create_async_engine(url.set(drivername="postgresql+psycopg_async"))
    routed = {None: tenancy.schema_name(TENANT)}
    query = sa.select(documents).where(documents.c.id == document_id)
    samples: list[float] = []
    async with engine.connect() as opened:
        conn = await opened.execution_options(schema_translate_map=routed)
        for _ in range(reads):
            started = time.perf_counter()
            (await conn.execute(query)).one()
            samples.append(time.perf_counter() - started)
    await engine.dispose()
    return _p50_us(samples)


async def _raw_reads(url: URL, document_id: uuid.UUID, reads: int) -> float:
    """The same read as SQL text on psycopg's AsyncConnection, nothing around it."""
    schema = tenancy.schema_name(TENANT)
    columns = ", ".join(c.name for c in documents.c)
    query = f'SELECT {columns} FROM "{schema}".documents WHERE id = %s'
    conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
    samples: list[float] = []
    async with await psycopg.AsyncConnection.connect(conninfo) as conn, conn.cursor() as cursor:
        for _ in range(reads):
            started = time.perf_counter()
            await cursor.execute(query, (document_id,))
            await cursor.fetchone()
            samples.append(time.perf_counter() - started)
    return _p50_us(samples)


async def _waits_async(uow: AsyncUnitOfWork, job: jobs.Job) -> None:
    await asyncio.sleep(HANDLER_IO_SECONDS)


def _waits(uow: UnitOfWork, job: jobs.Job) -> None:
    time.sleep(HANDLER_IO_SECONDS)


def _handler_rate(url: URL, count: int, *, asynchronous: bool) -> float:
    """Jobs per second of one worker whose handlers wait on I/O, first claim to last done."""
    kind = f"bench.io.{uuid.uuid4().hex[:8]}"
    engine = dms.create_engine(url)
    with engine.begin() as conn:
        jobs.enqueue_many(
            conn, [jobs.NewJob(kind=kind, payload={}, tenant=TENANT) for _ in range(count)]
        )
    handlers = {kind: _waits_async} if asynchronous else {kind: _waits}
    config = jobs.WorkerConfig(
        concurrency=ASYNC_HANDLERS if asynchronous else THREADS, poll_seconds=0.05
    )
    done = sa.select(sa.func.count()).where(
        processing_jobs.c.kind == kind, processing_jobs.c.state == "done"
    )
    started = time.perf_counter()
    with dms.DocumentWorker(engine, handlers, config):
        while True:
            with engine.connect() as conn:
                if conn.scalar(done) == count:
                    break
            time.sleep(0.02)
    elapsed = time.perf_counter() - started
    engine.dispose()
    return count / elapsed


def _a_document(url: URL, user: uuid.UUID) -> uuid.UUID:
    engine = dms.create_engine(url)
    with UnitOfWork(engine, tenant=TENANT, user_id=user) as uow:
        document_id = uow.documents.add(title="read me").id
        uow.commit()
    engine.dispose()
    return document_id


def _table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| measure | value | ratio |", "|---|---:|---:|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main() -> None:
    """Measure, print, and with ``--write`` record in bench/results/async.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--units", type=int, default=3000)
    parser.add_argument("--reads", type=int, default=3000)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with temporary_database(normalize_url(args.database_url), prefix="bench_async") as url:
        user = _setup(url)
        document_id = _a_document(url, user)
        sync_rate = _sync_units(url, user, args.units)
        async_rate = asyncio.run(_async_units(url, user, args.units))
        raw = asyncio.run(_raw_reads(url, document_id, args.reads))
        core = asyncio.run(_sqlalchemy_reads(url, document_id, args.reads))
        bridged = asyncio.run(_async_reads(url, user, document_id, args.reads))
        plain = _sync_reads(url, user, document_id, args.reads)
        threaded = _handler_rate(url, args.jobs, asynchronous=False)
        looped = _handler_rate(url, args.jobs, asynchronous=True)
    rows = [
        (f"units of work/s, sync, {THREADS} threads", f"{sync_rate:,.0f}", "1.00"),
        (
            f"units of work/s, dms.aio, {TASKS} tasks",
            f"{async_rate:,.0f}",
            f"{async_rate / sync_rate:.2f}",
        ),
        ("read by id, raw psycopg async, p50 µs", f"{raw:,.0f}", "1.00"),
        ("read by id, SQLAlchemy AsyncConnection, p50 µs", f"{core:,.0f}", f"{core / raw:.2f}"),
        ("read by id, dms.aio, p50 µs", f"{bridged:,.0f}", f"{bridged / raw:.2f}"),
        ("read by id, sync dms, p50 µs", f"{plain:,.0f}", f"{plain / raw:.2f}"),
        (f"10 ms handlers, jobs/s, {THREADS} threads", f"{threaded:,.0f}", "1.00"),
        (
            f"10 ms async handlers, jobs/s, {ASYNC_HANDLERS} on one loop",
            f"{looped:,.0f}",
            f"{looped / threaded:.2f}",
        ),
    ]
    table = _table(rows)
    print(table)
    if args.write:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        RESULTS.write_text(
            f"# dms.aio against the synchronous API and raw psycopg async\n\n"
            f"`python -m bench.async_api --units {args.units} --reads {args.reads} "
            f"--jobs {args.jobs}`, "
            f"{stamp}, one run.\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
