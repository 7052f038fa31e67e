"""dms.jobs: one tenant's backlog against ten tenants' trickle of jobs, run until it is drained.

Tenant ``bulk`` enqueues the whole backlog at once; ten other tenants each enqueue one job per
second while a ``dms.jobs.Worker`` (``concurrency`` threads, handlers sleeping ``handler_ms``)
drains the queue. Unlike the other systems' runs, this one is not bounded by time: the trickle
lasts until the backlog is drained, and the run until every job is done. The ten tenants'
enqueue-to-start waits come from the rows' ``created_at`` and ``started_at``; the backlog's
drain rate is its size over the time until no bulk job is left.

Each configuration (:data:`SHARED`, then those the scenario asks for) is one more run on the
same database with the trickle (the first also drains the bulk alone, the measure of every
configuration), with the Worker's options and the per-tenant limits (:class:`dms.jobs.Limit`)
set for its run. Each run starts on a vacuumed table, as autovacuum would leave it between
runs; within a run nothing vacuums.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from bench.fairness.common import BULK, ENQUEUE_BATCH, SMALL, Outcome, Scenario, trickle
from bench.jobs import dms_queue
from dms import jobs, migrations, tenancy
from dms.jobs.tables import processing_jobs as table
from dms.testing import temporary_database
from dms.users import create_users_stand_in

SYSTEM = "dms.jobs"


@dataclass(frozen=True)
class Configuration:
    """One way to run the Worker: a label, the Worker's extra options, the limits set."""

    label: str
    worker_options: Mapping[str, Any] = field(default_factory=dict)
    limits: tuple[jobs.Limit, ...] = ()


#: The Worker's configuration without limits, run alone and with the trickle.
SHARED = Configuration("claims shared between tenants (no limit)")


def every_tenant_limited(max_running: int) -> Configuration:
    """Every tenant limited to ``max_running`` jobs at once: a per-tenant cap an operator sets
    for all (``--every-tenant-limit``; 0: no such run)."""
    return Configuration(
        f"claims shared, every tenant limited to {max_running} running",
        limits=tuple(jobs.Limit(tenant=name, max_running=max_running) for name in (BULK, *SMALL)),
    )


#: With ``--with-limit``: a limit that binds. It leaves the small tenants one of the four
#: runners whatever the backlog, and costs the backlog far more than that one runner (slow
#: behind a large backlog of short jobs: see results/fairness.md).
BINDING = Configuration(
    "claims shared, bulk limited to 3 running (a binding limit)",
    limits=(jobs.Limit(tenant=BULK, max_running=3),),
)


def run(server: URL, scenario: Scenario) -> list[Outcome]:
    """Every configuration, the bulk alone and then with the trickle, on one database."""
    outcomes = []
    with temporary_database(server, prefix="dms_bench_fair") as url:
        engine = _prepare(url)
        try:
            chosen = [SHARED]
            chosen += [every_tenant_limited(n) for n in scenario.every_tenant_limits]
            chosen += [BINDING] if scenario.with_limit else []
            for index, configuration in enumerate(chosen):
                # The bulk alone once, without limits: what every configuration is measured by.
                for with_trickle in (False, True) if index == 0 else (True,):
                    outcomes.append(
                        _run(url, engine, scenario, configuration, with_trickle=with_trickle)
                    )
        finally:
            engine.dispose()
    return outcomes


def _prepare(url: URL) -> Engine:
    engine = sa.create_engine(url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    with engine.begin() as conn:
        for name in (BULK, *SMALL):
            tenancy.register(conn, name)  # jobs need the registry row only
    return engine


def _run(
    url: URL,
    engine: Engine,
    scenario: Scenario,
    configuration: Configuration,
    *,
    with_trickle: bool,
) -> Outcome:
    kind = f"bench.fair.{uuid.uuid4().hex[:8]}"
    # What autovacuum would have done since the previous run: without it every claim walks the
    # index entries the earlier runs' 200,000-job backlogs left dead.
    dms_queue.vacuum(engine)
    with engine.begin() as conn:
        for start in range(0, scenario.bulk, ENQUEUE_BATCH):
            batch = min(ENQUEUE_BATCH, scenario.bulk - start)
            jobs.enqueue_many(conn, [jobs.NewJob(kind=kind, payload={}, tenant=BULK)] * batch)
    pause = scenario.handler_ms / 1000

    def handle(transaction: object, job: jobs.Job, /) -> None:
        time.sleep(pause)

    def enqueue(tenant: str, key: str) -> None:
        with engine.begin() as conn:
            jobs.enqueue(conn, kind, {}, tenant=tenant)

    worker_engine = sa.create_engine(url, pool_size=scenario.concurrency + 5, pool_pre_ping=True)
    with engine.begin() as conn:
        for limit in configuration.limits:
            jobs.set_limit(conn, limit)
    stop = threading.Event()
    trickler = threading.Thread(target=trickle, args=(stop, enqueue), daemon=True)
    started = time.perf_counter()
    with jobs.Worker(
        worker_engine,
        {kind: handle},
        jobs.WorkerConfig(
            concurrency=scenario.concurrency,
            lease=timedelta(minutes=5),
            **configuration.worker_options,
        ),
    ):
        if with_trickle:
            trickler.start()
        while _left(engine, kind, BULK):
            time.sleep(0.05)
        drained = time.perf_counter() - started
        stop.set()
        if with_trickle:
            trickler.join()
        while _left(engine, kind, None):
            time.sleep(0.05)
    worker_engine.dispose()
    with engine.begin() as conn:
        for limit in configuration.limits:
            jobs.remove_limit(conn, limit.tenant, kind=limit.kind)
    return Outcome(
        system=SYSTEM,
        configuration=configuration.label,
        trickle=with_trickle,
        bulk_started=scenario.bulk,
        bulk_seconds=drained,
        drained=True,
        waits_ms=_small_waits(engine, kind),
    )


def _left(engine: Engine, kind: str, tenant: str | None) -> bool:
    query = sa.select(sa.func.count()).where(
        table.c.kind == kind, table.c.state.in_(["queued", "running"])
    )
    if tenant is not None:
        query = query.where(table.c.tenant == tenant)
    with engine.connect() as conn:
        return bool(conn.scalar(query))


def _small_waits(engine: Engine, kind: str) -> list[float]:
    wait = sa.func.extract("epoch", table.c.started_at - table.c.created_at) * 1000
    query = sa.select(wait).where(table.c.kind == kind, table.c.tenant != BULK)
    with engine.connect() as conn:
        return [float(value) for value in conn.scalars(query)]
