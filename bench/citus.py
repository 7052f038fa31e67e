"""Benchmark: the same fleet and job workload on a Citus cluster and on one PostgreSQL server.

One run measures both, each in a temporary database of its own (dropped afterwards), and
prints every figure with its ratio Citus / PostgreSQL:

* tenant creation: ``create_tenant`` one call after another (p50 of a sample), and
  ``create_tenants`` of the whole fleet with ``--jobs`` worker processes;
* a no-op ``upgrade`` of the fleet, and a real additive migration (a column with a default and
  an index on ``documents``, a bench-only revision on top of head) up and back down;
* ``fleet_status`` (on Citus it also reads where each tenant lives);
* a unit of work that writes a document, alone and with a job enqueued in the same
  transaction (on Citus the tenant's node and the coordinator, where the queue lives), p50;
* job processing at concurrency 8: ``DocumentWorker(concurrency=8)`` draining jobs spread over the
  fleet's first tenants, each handler reading its tenant (one statement on the tenant's node)
  in its unit of work;
* on Citus, moving one tenant with its data to the other worker (``move_tenant``).

    python -m bench.citus [--citus URL] [--postgres URL] [--tenants 500] [--jobs 2] [--write]

Defaults: the cluster of ``../shared/tools/citus-cluster start`` (127.0.0.1:9700) and the
machine's PostgreSQL 15 (127.0.0.1:5432). ``--write`` puts the results in
bench/results/citus.md. Not a test: the machine is shared and timings are noisy; only the
ratios of one run mean something.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from bench.fleet import _scripts_with_additive_revision
from dms import (
    DocumentWorker,
    UnitOfWork,
    WorkerConfig,
    citus,
    jobs,
    migrations,
    placement,
    provisioning,
)
from dms.db import normalize_url
from dms.migrations import Scripts
from dms.testing import temporary_database
from dms.users import create_user, create_users_stand_in

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "citus.md"
#: Tenants created one call after another, for the serial figure.
SERIAL_SAMPLE = 10
#: Units of work timed for the enqueue figures.
UOW_SAMPLE = 100
#: Jobs processed at concurrency 8, spread over this many tenants.
JOB_COUNT = 2000
JOB_TENANTS = 20
CONCURRENCY = 8


@dataclass
class Engines:
    """The figures of one engine, by name, in the order they were measured."""

    label: str
    figures: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        print(f"[{self.label}] {name}: {_shown(seconds)}", flush=True)
        self.figures[name] = seconds


def _shown(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def _serial_create(engine: Engine, result: Engines) -> None:
    names = [f"serial_{index:03d}" for index in range(SERIAL_SAMPLE)]
    timings = []
    for name in names:
        started = time.perf_counter()
        provisioning.create_tenant(engine, name)
        timings.append(time.perf_counter() - started)
    provisioning.drop_tenants(engine, names)
    result.add(
        f"create_tenant, one after another (p50 of {SERIAL_SAMPLE})", statistics.median(timings)
    )


def _fleet(engine: Engine, slugs: list[str], jobs_n: int, result: Engines) -> None:
    took = _timed(lambda: provisioning.create_tenants(engine, slugs, jobs=jobs_n))
    result.add(f"create_tenants of {len(slugs)}, --jobs {jobs_n} (total)", took)
    result.add("  per tenant", took / len(slugs))
    result.add("fleet_status", _timed(lambda: migrations.fleet_status(engine)))
    result.add(
        "no-op upgrade of the fleet", _timed(lambda: migrations.upgrade(engine, jobs=jobs_n))
    )
    with _scripts_with_additive_revision() as ini:
        scripts = Scripts(location=str(ini.parent / "scripts"))
        up = _timed(lambda: migrations.upgrade(engine, jobs=jobs_n, scripts=scripts))
        result.add(f"additive migration up, {len(slugs)} tenants, --jobs {jobs_n}", up)
        down = _timed(
            lambda: migrations.downgrade(
                engine, migrations.head_revision(), jobs=jobs_n, scripts=scripts
            )
        )
        result.add(f"additive migration down, {len(slugs)} tenants, --jobs {jobs_n}", down)


def _units_of_work(engine: Engine, slug: str, user: uuid.UUID, result: Engines) -> None:
    def write(enqueue: bool) -> None:
        with UnitOfWork(engine, tenant=slug, user_id=user) as uow:
            document = uow.documents.add(title=f"doc {uuid.uuid4().hex}")
            if enqueue:
                jobs.enqueue(uow.connection, "bench.noop", {"id": str(document.id)}, tenant=slug)
            uow.commit()

    for enqueue in (False, True):
        write(enqueue)  # warm the pool and the caches
        timings = []
        for _ in range(UOW_SAMPLE):
            started = time.perf_counter()
            write(enqueue)
            timings.append(time.perf_counter() - started)
        name = "unit of work: add a document" + (" + enqueue a job" if enqueue else "")
        result.add(f"{name} (p50 of {UOW_SAMPLE})", statistics.median(timings))
    with engine.begin() as conn:
        conn.execute(sa.delete(jobs.tables.processing_jobs))


def _processing(engine: Engine, slugs: list[str], result: Engines) -> None:
    kind = "bench.tag"

    def handler(uow: UnitOfWork, job: jobs.Job) -> None:
        uow.documents.any_exist()  # one statement on the tenant's node

    with engine.begin() as conn:
        jobs.enqueue_many(
            conn,
            [
                jobs.NewJob(kind=kind, payload={}, tenant=slugs[index % len(slugs)])
                for index in range(JOB_COUNT)
            ],
        )
    started = time.perf_counter()
    with DocumentWorker(
        engine, {kind: handler}, WorkerConfig(concurrency=CONCURRENCY, poll_seconds=0.05)
    ):
        while _left(engine, kind):
            time.sleep(0.05)
    took = time.perf_counter() - started
    with engine.connect() as conn:
        done = jobs.stats(conn, kind=kind).total(jobs.JobState.DONE)
    if done != JOB_COUNT:  # a figure of failing jobs would measure the failures
        raise SystemExit(f"only {done} of {JOB_COUNT} jobs were done: see the worker's log")
    result.add(f"process {JOB_COUNT} jobs at concurrency {CONCURRENCY} (total)", took)
    result.add("  per job", took / JOB_COUNT)


def _left(engine: Engine, kind: str) -> int:
    table = jobs.tables.processing_jobs
    with engine.connect() as conn:
        unfinished = table.c.state.in_(["queued", "running"])
        query = sa.select(sa.func.count()).where(table.c.kind == kind, unfinished)
        return int(conn.scalar(query) or 0)


def _move(engine: Engine, slug: str, result: Engines) -> None:
    with engine.connect() as conn:
        if not citus.is_citus(conn):
            return
        here = placement.tenant_nodes(engine)[slug]
        there = next(n for n in citus.nodes(conn) if n.holds_shards and n != here)
    result.add(
        "move one tenant to the other worker",
        _timed(lambda: placement.move_tenant(engine, slug, there.name)),
    )


def _run(server: URL, label: str, count: int, jobs_n: int) -> Engines:
    result = Engines(label)
    with temporary_database(server, prefix="dms_bench_citus") as url:
        engine = sa.create_engine(url, pool_size=CONCURRENCY + 4)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        with engine.begin() as conn:
            user = create_user(conn, email="bench@example.org", display_name="Bench")
        _serial_create(engine, result)
        slugs = [f"t{index:05d}" for index in range(count)]
        _fleet(engine, slugs, jobs_n, result)
        _units_of_work(engine, slugs[0], user, result)
        _processing(engine, slugs[:JOB_TENANTS], result)
        _move(engine, slugs[0], result)
        engine.dispose()
    return result


def _table(citus_result: Engines, plain: Engines, count: int, jobs_n: int) -> str:
    lines = [
        "# Citus cluster against one PostgreSQL server",
        "",
        f"`python -m bench.citus --tenants {count} --jobs {jobs_n} --write`, "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Citus 13.2.2: a coordinator and two "
        "workers, all three on this machine's PostgreSQL 15, against that PostgreSQL 15 alone; "
        f"one 2-core machine shared with other work (load average {os.getloadavg()[0]:.1f} at "
        "the end). Only the ratios of this one run mean something.",
        "",
        "| figure | PostgreSQL 15 | Citus | Citus / PostgreSQL |",
        "|---|---|---|---|",
    ]
    for name, seconds in citus_result.figures.items():
        base = plain.figures.get(name)
        ratio = f"{seconds / base:.1f}x" if base else "(Citus only)"
        shown = _shown(base) if base is not None else "-"
        lines.append(f"| {name} | {shown} | {_shown(seconds)} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citus", default="postgresql://postgres@127.0.0.1:9700/postgres")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--tenants", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes of fleet calls")
    parser.add_argument("--write", action="store_true", help="write bench/results/citus.md")
    args = parser.parse_args()
    plain = _run(normalize_url(args.postgres), "PostgreSQL", args.tenants, args.jobs)
    clustered = _run(normalize_url(args.citus), "Citus", args.tenants, args.jobs)
    table = _table(clustered, plain, args.tenants, args.jobs)
    print(table)
    if args.write:
        RESULTS.write_text(table)


if __name__ == "__main__":
    main()
