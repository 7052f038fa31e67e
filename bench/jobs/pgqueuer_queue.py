"""pgqueuer (asyncpg): enqueue, its QueueManager consumer in drain mode, latency."""

from __future__ import annotations

import asyncio
import time

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

from bench.jobs.common import LATENCY_RATE_PER_SECOND, rate

ENTRYPOINT = "noop"


def dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


async def _queries(url: str) -> tuple[asyncpg.Connection, Queries]:
    conn = await asyncpg.connect(dsn(url))
    return conn, Queries(AsyncpgDriver(conn))


def prepare(url: str) -> None:
    """Install pgqueuer's schema."""

    async def install() -> None:
        conn, queries = await _queries(url)
        await queries.install()
        await conn.close()

    asyncio.run(install())


def enqueue_single(url: str, count: int) -> float:
    """Jobs/s enqueueing one job per call."""

    async def run() -> float:
        conn, queries = await _queries(url)
        started = time.perf_counter()
        for _ in range(count):
            await queries.enqueue(ENTRYPOINT, None)
        seconds = time.perf_counter() - started
        await queries.clear_queue()
        await conn.close()
        return rate(count, seconds)

    return asyncio.run(run())


def enqueue_batches(url: str, batches: int, size: int) -> float:
    """Jobs/s enqueueing ``size`` jobs per call."""

    async def run() -> float:
        conn, queries = await _queries(url)
        started = time.perf_counter()
        for _ in range(batches):
            await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)
        seconds = time.perf_counter() - started
        await queries.clear_queue()
        await conn.close()
        return rate(batches * size, seconds)

    return asyncio.run(run())


def process(url: str, count: int, concurrency: int, batch_size: int) -> float:
    """Jobs/s of a QueueManager in drain mode over ``count`` queued no-op jobs."""

    async def run() -> float:
        conn, queries = await _queries(url)
        for start in range(0, count, 1000):
            size = min(1000, count - start)
            await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)
        await conn.execute("VACUUM ANALYZE pgqueuer")  # as dms.jobs' runs get (dms_queue.vacuum)
        worker_conn = await asyncpg.connect(dsn(url))
        manager = QueueManager(Queries(AsyncpgDriver(worker_conn)))

        @manager.entrypoint(ENTRYPOINT, concurrency_limit=concurrency)
        async def noop(job: Job) -> None:
            return None

        started = time.perf_counter()
        await manager.run(batch_size=batch_size, mode=QueueExecutionMode.drain)
        seconds = time.perf_counter() - started
        left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
        await queries.clear_queue()
        await conn.close()
        await worker_conn.close()
        if left:
            raise RuntimeError(f"pgqueuer left {left} jobs in its queue")
        return rate(count, seconds)

    return asyncio.run(run())


def latency(url: str, count: int, concurrency: int) -> list[float]:
    """Milliseconds from enqueue to the entrypoint's start, at 100 jobs/s offered."""

    async def run() -> list[float]:
        conn, queries = await _queries(url)
        worker_conn = await asyncpg.connect(dsn(url))
        manager = QueueManager(Queries(AsyncpgDriver(worker_conn)))
        sent: dict[bytes, float] = {}
        samples: list[float] = []
        done = asyncio.Event()

        @manager.entrypoint(ENTRYPOINT, concurrency_limit=concurrency)
        async def note(job: Job) -> None:
            samples.append((time.perf_counter() - sent[job.payload or b""]) * 1000)
            if len(samples) == count:
                done.set()

        consumer = asyncio.create_task(manager.run())
        await asyncio.sleep(0.5)  # idle workers
        next_at = time.perf_counter()
        for n in range(count):
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += 1 / LATENCY_RATE_PER_SECOND
            key = str(n).encode()
            sent[key] = time.perf_counter()
            await queries.enqueue(ENTRYPOINT, key)
        await asyncio.wait_for(done.wait(), timeout=60)
        manager.shutdown.set()
        await consumer
        await queries.clear_queue()
        await conn.close()
        await worker_conn.close()
        return samples

    return asyncio.run(run())
