"""pgqueuer: one tenant's backlog against ten tenants' trickle, bounded by time.

pgqueuer has no tenants. A tenant is an entrypoint here (``bulk``, ``small00`` ...), all bound
to the same handler: entrypoints are what pgqueuer's dequeue walks one by one (a ``LATERAL``
probe per entrypoint) and what its only per-key limit, ``concurrency_limit``, counts. Its
dequeue then merges what it found by ``priority DESC, id ASC`` and keeps ``batch_size`` of
them: with equal priorities the oldest jobs win, so without a limit the backlog, enqueued
first, comes first.

The worker is one ``QueueManager`` with ``max_concurrent_tasks`` = the scenario's concurrency
(its only global cap: without it the manager starts every job it can dequeue, 200,000 tasks at
once) and the largest batch that cap allows (``batch_size`` = half of it, pgqueuer refuses
more; a probe with 20,000 jobs and batch 1 drained the backlog slower and, with the limit, left
the small tenants' jobs waiting for seconds). Handlers are coroutines sleeping ``handler_ms``.
Configurations (:func:`configurations`): no limit; the same ``concurrency_limit`` on every
entrypoint (a per-tenant limit), which an operator can set in advance for every tenant; and,
labelled as knowing the future, no limit with the small tenants' jobs at a higher
``priority`` than the backlog's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from sqlalchemy.engine import URL

from bench.fairness.common import (
    BULK,
    ENQUEUE_BATCH,
    SMALL,
    Outcome,
    Scenario,
    Stamps,
    trickle,
    without_jit,
)
from bench.jobs import pgqueuer_queue
from dms.testing import temporary_database

SYSTEM = "pgqueuer"


@dataclass(frozen=True)
class Configuration:
    """A label for the table, every entrypoint's ``concurrency_limit`` (0: none), the batch."""

    label: str
    limit: int
    batch_size: int
    small_priority: int = 0


def configurations(scenario: Scenario) -> tuple[Configuration, ...]:
    """No limit; all but one of the worker's slots as every tenant's limit; small ones first."""
    limit = max(1, scenario.concurrency - 1)
    batch = max(1, scenario.concurrency // 2)
    return (
        Configuration("entrypoint per tenant, no limit", 0, batch),
        Configuration(
            f"entrypoint per tenant, concurrency_limit={limit} each (a per-tenant limit)",
            limit,
            batch,
        ),
        Configuration(
            "entrypoint per tenant, small tenants at priority 1 (knows the future)",
            0,
            batch,
            small_priority=1,
        ),
    )


def run(server: URL, scenario: Scenario) -> list[Outcome]:
    """The bulk alone in the first configuration, then every configuration with the trickle.

    Each run on a database of its own, with the whole backlog enqueued before it starts.
    """
    every = configurations(scenario)
    runs = [(every[0], False), *((each, True) for each in every)]
    outcomes = []
    for configuration, with_trickle in runs:
        with temporary_database(server, prefix="dms_bench_fair_pgq") as url:
            without_jit(url)
            dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
            pgqueuer_queue.prepare(dsn)
            outcomes.append(
                asyncio.run(_run(dsn, scenario, configuration, with_trickle=with_trickle))
            )
    return outcomes


async def _run(
    dsn: str, scenario: Scenario, configuration: Configuration, *, with_trickle: bool
) -> Outcome:
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    for start in range(0, scenario.bulk, ENQUEUE_BATCH):
        size = min(ENQUEUE_BATCH, scenario.bulk - start)
        await queries.enqueue([BULK] * size, [None] * size, [0] * size)
    if scenario.analyze:
        await conn.execute("ANALYZE pgqueuer")
    await conn.close()

    stamps = Stamps()
    pause = scenario.handler_ms / 1000

    async def handle(job: Job) -> None:
        stamps.start(None if job.entrypoint == BULK else (job.payload or b"").decode())
        await asyncio.sleep(pause)

    worker_conn = await asyncpg.connect(dsn)
    manager = QueueManager(Queries(AsyncpgDriver(worker_conn)))
    for tenant in (BULK, *SMALL):
        manager.entrypoint(tenant, concurrency_limit=configuration.limit)(handle)
    stop = threading.Event()
    trickler = threading.Thread(
        target=_trickle, args=(dsn, configuration.small_priority, stamps, stop), daemon=True
    )
    began = time.perf_counter()
    consumer = asyncio.create_task(
        manager.run(
            batch_size=configuration.batch_size,
            max_concurrent_tasks=scenario.concurrency,
        )
    )
    if with_trickle:
        trickler.start()
    await asyncio.sleep(scenario.window_s)
    ended = time.perf_counter()
    stop.set()
    manager.shutdown.set()
    if with_trickle:
        await asyncio.to_thread(trickler.join)
    await consumer
    await worker_conn.close()
    return stamps.outcome(SYSTEM, configuration.label, began=began, ended=ended, bulk=scenario.bulk)


def _trickle(dsn: str, priority: int, stamps: Stamps, stop: threading.Event) -> None:
    """The small tenants' jobs, from this thread's own event loop and connection."""
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(dsn))
    queries = Queries(AsyncpgDriver(conn))

    def enqueue(tenant: str, key: str) -> None:
        stamps.send(key)
        loop.run_until_complete(queries.enqueue(tenant, key.encode(), priority))

    try:
        trickle(stop, enqueue)
    finally:
        loop.run_until_complete(conn.close())
        loop.close()
