"""Fairness between tenants: one tenant's backlog against ten tenants' trickle of jobs.

Tenant ``bulk`` enqueues ``--bulk`` jobs at once; ten other tenants each enqueue one job per
second while a ``dms.jobs.Worker`` (``--concurrency`` threads, handlers of ``--handler-ms``)
drains the queue. Reported: the ten tenants' enqueue-to-start latency (p50, p99, max, from the
rows' ``created_at`` and ``started_at``) and the bulk's drain rate, against the same worker
draining the bulk alone in the same run (the ratio is what counts: the machine is shared).

    python bench/fairness.py [--url URL] [--bulk 20000] [--concurrency 4] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms import jobs, migrations, tenancy
from dms.db import normalize_url
from dms.jobs.tables import processing_jobs as table
from dms.testing import temporary_database
from dms.users import create_users_stand_in

SMALL_TENANTS = 10
RESULTS = Path(__file__).parent / "results" / "fairness.md"


def main() -> None:
    """Run both scenarios and print (or ``--write``) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--bulk", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--handler-ms", type=float, default=1.0)
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    with temporary_database(normalize_url(args.url), prefix="dms_bench_fair") as url:
        engine = _prepare(url)
        alone = _run(url, engine, args, trickle=False)
        shared = _run(url, engine, args, trickle=True)
        engine.dispose()
    table_text = _table(args, alone, shared)
    print(table_text)
    if args.write:
        RESULTS.write_text(table_text)


def _prepare(url: URL) -> Engine:
    engine = sa.create_engine(url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    with engine.begin() as conn:
        for name in ["bulk", *(f"small{n:02d}" for n in range(SMALL_TENANTS))]:
            tenancy.register(conn, name)  # jobs need the registry row only
    return engine


def _run(url: URL, engine: Engine, args: argparse.Namespace, *, trickle: bool) -> dict[str, float]:
    kind = f"bench.fair.{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        for start in range(0, args.bulk, 1000):
            batch = min(1000, args.bulk - start)
            jobs.enqueue_many(conn, [jobs.NewJob(kind=kind, payload={}, tenant="bulk")] * batch)
    pause = args.handler_ms / 1000

    def handle(transaction: object, job: jobs.Job, /) -> None:
        time.sleep(pause)

    worker_engine = sa.create_engine(url, pool_size=args.concurrency + 5, pool_pre_ping=True)
    stop = threading.Event()
    trickler = threading.Thread(target=_trickle, args=(engine, kind, stop), daemon=True)
    started = time.perf_counter()
    with jobs.Worker(
        worker_engine, {kind: handle}, concurrency=args.concurrency, lease=timedelta(minutes=5)
    ):
        if trickle:
            trickler.start()
        while _left(engine, kind, "bulk"):
            time.sleep(0.05)
        drained = time.perf_counter() - started
        stop.set()
        if trickle:
            trickler.join()
        while _left(engine, kind, None):
            time.sleep(0.05)
    worker_engine.dispose()
    waits = _small_waits(engine, kind)
    return {
        "drain_per_s": args.bulk / drained,
        "small_jobs": float(len(waits)),
        "p50_ms": statistics.median(waits) if waits else 0.0,
        "p99_ms": _percentile(waits, 0.99),
        "max_ms": max(waits, default=0.0),
    }


def _trickle(engine: Engine, kind: str, stop: threading.Event) -> None:
    """Each small tenant enqueues one job per second, spread over the second."""
    next_at = time.perf_counter()
    while not stop.is_set():
        for n in range(SMALL_TENANTS):
            next_at += 1 / SMALL_TENANTS
            time.sleep(max(0.0, next_at - time.perf_counter()))
            with engine.begin() as conn:
                jobs.enqueue(conn, kind, {}, tenant=f"small{n:02d}")


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
    query = sa.select(wait).where(table.c.kind == kind, table.c.tenant != "bulk")
    with engine.connect() as conn:
        return [float(value) for value in conn.scalars(query)]


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _table(args: argparse.Namespace, alone: dict[str, float], shared: dict[str, float]) -> str:
    ratio = shared["drain_per_s"] / alone["drain_per_s"]
    return "\n".join(
        [
            "# Fairness between tenants (bench/fairness.py, one run)",
            "",
            f"A `dms.jobs.Worker` at concurrency {args.concurrency}, handlers of "
            f"{args.handler_ms:g} ms; tenant `bulk` enqueues {args.bulk:,} jobs at once, ten "
            "tenants one job per second each while the bulk drains.",
            "",
            "| | bulk alone | bulk + ten tenants |",
            "|---|---|---|",
            f"| bulk drained (jobs/s) | {alone['drain_per_s']:,.0f} | "
            f"{shared['drain_per_s']:,.0f} ({ratio:.2f}x) |",
            f"| ten tenants' jobs | | {shared['small_jobs']:.0f} |",
            f"| their enqueue-to-start p50 / p99 / max (ms) | | {shared['p50_ms']:.1f} / "
            f"{shared['p99_ms']:.1f} / {shared['max_ms']:.1f} |",
            "",
        ]
    )


if __name__ == "__main__":
    main()
