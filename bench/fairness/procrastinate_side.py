"""procrastinate: one tenant's backlog against ten tenants' trickle, bounded by time.

procrastinate has no tenants. A tenant is a queue here (``queue_name`` = the tenant): the one
worker listens to every queue, as a worker started without ``queues`` does. Its fetch takes the
one job of highest ``priority``, then lowest ``id``, among the queues it serves: queues filter,
they do not share, so with equal priorities the backlog, enqueued first, comes first. Its only
per-key restriction is ``lock``: a job does not start while a job of the same lock is running
or an earlier one waits, i.e. at most one job per lock at a time. With ``lock`` = the tenant
that is a per-tenant limit of one.

The worker is ``run_worker_async(concurrency=...)`` with the scenario's concurrency and its
defaults otherwise (LISTEN/NOTIFY on, so a deferred job wakes it); handlers are coroutines
sleeping ``handler_ms``. Configurations (:data:`CONFIGURATIONS`): queue per tenant; the same
with ``lock`` = the tenant (a per-tenant limit of one); and, labelled as knowing the future,
the small tenants' jobs deferred at a higher ``priority`` than the backlog's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any

import procrastinate
from sqlalchemy.engine import URL

from bench.fairness.common import (
    BULK,
    ENQUEUE_BATCH,
    Outcome,
    Scenario,
    Stamps,
    trickle,
    without_jit,
)
from bench.jobs import procrastinate_queue
from dms.testing import temporary_database

SYSTEM = "procrastinate"
TASK = "work"


@dataclass(frozen=True)
class Configuration:
    """A label for the table, whether each tenant is a lock, the small tenants' priority."""

    label: str
    lock: bool = False
    small_priority: int = 0


#: The configurations run with the trickle; the bulk alone runs with the first.
CONFIGURATIONS = (
    Configuration("queue per tenant, one worker on every queue"),
    Configuration("queue per tenant, lock = tenant (a per-tenant limit of 1)", lock=True),
    Configuration(
        "queue per tenant, small tenants at priority 1 (knows the future)", small_priority=1
    ),
)


def run(server: URL, scenario: Scenario) -> list[Outcome]:
    """The bulk alone in the first configuration, then every configuration with the trickle.

    Each run on a database of its own, with the whole backlog deferred before it starts.
    """
    first = CONFIGURATIONS[0]
    runs = [(first, False), *((each, True) for each in CONFIGURATIONS)]
    outcomes = []
    for configuration, with_trickle in runs:
        with temporary_database(server, prefix="dms_bench_fair_proc") as url:
            without_jit(url)
            conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
            procrastinate_queue.prepare(conninfo)
            outcomes.append(
                asyncio.run(_run(conninfo, scenario, configuration, with_trickle=with_trickle))
            )
    return outcomes


def _app(conninfo: str, stamps: Stamps, pause: float) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name=TASK)
    async def work(key: str | None = None) -> None:
        stamps.start(key)
        await asyncio.sleep(pause)

    return app


def _deferrer(app: procrastinate.App, tenant: str, configuration: Configuration) -> Any:
    return app.tasks[TASK].configure(
        queue=tenant,
        lock=tenant if configuration.lock else None,
        priority=0 if tenant == BULK else configuration.small_priority,
    )


async def _run(
    conninfo: str, scenario: Scenario, configuration: Configuration, *, with_trickle: bool
) -> Outcome:
    stamps = Stamps()
    app = _app(conninfo, stamps, scenario.handler_ms / 1000)
    async with app.open_async():
        bulk = _deferrer(app, BULK, configuration)
        for start in range(0, scenario.bulk, ENQUEUE_BATCH):
            await bulk.batch_defer_async(
                *({} for _ in range(min(ENQUEUE_BATCH, scenario.bulk - start)))
            )
        if scenario.analyze:
            await app.connector.execute_query_async("ANALYZE procrastinate_jobs")
        stop = threading.Event()
        trickler = threading.Thread(
            target=_trickle, args=(conninfo, configuration, stamps, stop), daemon=True
        )
        began = time.perf_counter()
        worker = asyncio.create_task(app.run_worker_async(concurrency=scenario.concurrency))
        if with_trickle:
            trickler.start()
        await asyncio.sleep(scenario.window_s)
        ended = time.perf_counter()
        stop.set()
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
        if with_trickle:
            await asyncio.to_thread(trickler.join)
    return stamps.outcome(SYSTEM, configuration.label, began=began, ended=ended, bulk=scenario.bulk)


def _trickle(
    conninfo: str, configuration: Configuration, stamps: Stamps, stop: threading.Event
) -> None:
    """The small tenants' jobs, from this thread's own event loop and connection pool."""
    loop = asyncio.new_event_loop()
    app = _app(conninfo, stamps, 0.0)
    loop.run_until_complete(app.open_async())

    def enqueue(tenant: str, key: str) -> None:
        stamps.send(key)
        loop.run_until_complete(_deferrer(app, tenant, configuration).defer_async(key=key))

    try:
        trickle(stop, enqueue)
    finally:
        loop.run_until_complete(app.close_async())
        loop.close()
