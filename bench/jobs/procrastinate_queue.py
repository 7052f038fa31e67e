"""procrastinate (psycopg 3): defer, its worker with ``wait=False``, latency."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import procrastinate

from bench.jobs.common import LATENCY_RATE_PER_SECOND, rate


def _app(url: str, received: list[Any] | None = None) -> procrastinate.App:
    conninfo = url.replace("postgresql+psycopg://", "postgresql://")
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name="noop")
    async def noop(sent: float | None = None) -> None:
        if received is not None and sent is not None:
            received.append(time.perf_counter() - sent)

    return app


def _task(app: procrastinate.App) -> Any:
    return app.tasks["noop"]


def prepare(url: str) -> None:
    """Apply procrastinate's schema."""

    async def run() -> None:
        app = _app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(run())


async def _clear(app: procrastinate.App) -> None:
    await app.connector.execute_query_async("DELETE FROM procrastinate_jobs")


def enqueue_single(url: str, count: int) -> float:
    """Jobs/s deferring one job per call."""

    async def run() -> float:
        app = _app(url)
        async with app.open_async():
            started = time.perf_counter()
            for _ in range(count):
                await _task(app).defer_async()
            seconds = time.perf_counter() - started
            await _clear(app)
        return rate(count, seconds)

    return asyncio.run(run())


def enqueue_batches(url: str, batches: int, size: int) -> float:
    """Jobs/s deferring ``size`` jobs per call (``batch_defer_async``)."""

    async def run() -> float:
        app = _app(url)
        async with app.open_async():
            started = time.perf_counter()
            for _ in range(batches):
                await _task(app).batch_defer_async(*[{} for _ in range(size)])
            seconds = time.perf_counter() - started
            await _clear(app)
        return rate(batches * size, seconds)

    return asyncio.run(run())


def process(url: str, count: int, concurrency: int) -> float:
    """Jobs/s of a worker with ``wait=False`` (it returns once the queue is empty)."""

    async def run() -> float:
        app = _app(url)
        async with app.open_async():
            for start in range(0, count, 1000):
                await _task(app).batch_defer_async(*[{} for _ in range(min(1000, count - start))])
            started = time.perf_counter()
            await app.run_worker_async(concurrency=concurrency, wait=False)
            seconds = time.perf_counter() - started
            left = await app.connector.execute_query_one_async(
                "SELECT count(*) AS n FROM procrastinate_jobs WHERE status <> 'succeeded'"
            )
            await _clear(app)
        if left["n"]:
            raise RuntimeError(f"procrastinate left {left['n']} jobs unfinished")
        return rate(count, seconds)

    return asyncio.run(run())


def latency(url: str, count: int, concurrency: int) -> list[float]:
    """Milliseconds from defer to the task's start, at 100 jobs/s offered."""

    async def run() -> list[float]:
        received: list[float] = []
        app = _app(url, received)
        async with app.open_async():
            worker = asyncio.create_task(app.run_worker_async(concurrency=concurrency))
            await asyncio.sleep(0.5)  # idle workers
            next_at = time.perf_counter()
            for _ in range(count):
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                next_at += 1 / LATENCY_RATE_PER_SECOND
                await _task(app).defer_async(sent=time.perf_counter())
            deadline = time.perf_counter() + 60
            while len(received) < count and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
            await _clear(app)
        return [seconds * 1000 for seconds in received]

    return asyncio.run(run())
