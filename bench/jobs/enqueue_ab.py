"""Enqueue only: dms.jobs against pgqueuer, interleaved in short slices, ratio per round.

    python -m bench.jobs.enqueue_ab [--url URL] [--rounds 9] [--single 1000] [--batches 100]

The enqueue measurements of ``python -m bench.jobs`` (the same calls: dms.jobs on one held
autocommit connection, pgqueuer's ``Queries.enqueue`` on one held asyncpg connection, every
call its own transaction, dms' jobs built and validated inside the timed loop), without the
processing runs, and interleaved finely: each round runs both systems in slices of
``--slice`` calls, taking turns (which one starts alternates), and sums each system's time.
Load from other processes on a shared machine then falls on both alike; each round's ratio
is printed (with each system's client CPU per call, both clients running in this process),
then their medians. ``--pgqueuer-payloads`` gives pgqueuer's jobs the payloads
dms' jobs carry (``{"n": ...}``, JSON-encoded by the caller as pgqueuer wants bytes); by
default, as in ``python -m bench.jobs``, they carry none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import NamedTuple

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries

from bench.jobs import dms_queue, pgqueuer_queue
from bench.jobs.run import DEFAULT_URL
from dms import jobs
from dms.db import normalize_url
from dms.testing import temporary_database

BATCH = 100


def parse_args() -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--single", type=int, default=1000, help="jobs per round, one per call")
    parser.add_argument("--batches", type=int, default=100, help="batches of 100 per round")
    parser.add_argument("--slice", type=int, default=10, help="batches per turn (x10 single)")
    parser.add_argument(
        "--pgqueuer-payloads",
        action="store_true",
        help="give pgqueuer's jobs dms' payloads, JSON-encoded (the bench gives it none)",
    )
    return parser.parse_args()


def main() -> None:
    """Run the rounds and print their figures."""
    args = parse_args()
    server = normalize_url(args.url)
    with ExitStack() as stack:
        dms_url = stack.enter_context(temporary_database(server, prefix="bench_enq_dms"))
        pgq_url = stack.enter_context(
            temporary_database(server, prefix="bench_enq_pgq")
        ).render_as_string(hide_password=False)
        engine = dms_queue.prepare(dms_url)
        stack.callback(engine.dispose)
        pgqueuer_queue.prepare(pgq_url)
        conn = stack.enter_context(engine.connect().execution_options(isolation_level="AUTOCOMMIT"))
        loop = asyncio.new_event_loop()
        stack.callback(loop.close)
        pgq_conn = loop.run_until_complete(asyncpg.connect(pgqueuer_queue.dsn(pgq_url)))
        stack.callback(lambda: loop.run_until_complete(pgq_conn.close()))
        queries = Queries(AsyncpgDriver(pgq_conn))
        kind = f"bench.enqueue.{uuid.uuid4().hex[:8]}"

        def dms_single(count: int) -> None:
            for n in range(count):
                jobs.enqueue(conn, kind, {"n": n}, tenant=dms_queue.TENANT)

        def dms_batches(count: int) -> None:
            for b in range(count):
                batch = [
                    jobs.NewJob(kind=kind, payload={"n": b * BATCH + n}, tenant=dms_queue.TENANT)
                    for n in range(BATCH)
                ]
                jobs.enqueue_many(conn, batch)

        def payload(n: int) -> bytes | None:
            # pgqueuer takes bytes: its caller encodes what dms.jobs encodes (and checks) itself.
            return json.dumps({"n": n}).encode() if args.pgqueuer_payloads else None

        async def pgq_single_async(count: int) -> None:
            for n in range(count):
                await queries.enqueue(pgqueuer_queue.ENTRYPOINT, payload(n))

        async def pgq_batches_async(count: int) -> None:
            for b in range(count):
                await queries.enqueue(
                    [pgqueuer_queue.ENTRYPOINT] * BATCH,
                    [payload(b * BATCH + n) for n in range(BATCH)],
                    [0] * BATCH,
                )

        def pgq_single(count: int) -> None:
            loop.run_until_complete(pgq_single_async(count))

        def pgq_batches(count: int) -> None:
            loop.run_until_complete(pgq_batches_async(count))

        shapes = {
            "single": (dms_single, pgq_single, args.single, args.slice * 10),
            "batch": (dms_batches, pgq_batches, args.batches, args.slice),
        }
        dms_single(20)  # warm up: statements prepared, caches filled
        pgq_single(20)
        ratios: dict[str, list[float]] = {shape: [] for shape in shapes}
        cpu: dict[str, list[tuple[float, float]]] = {shape: [] for shape in shapes}
        for n in range(args.rounds):
            line = []
            for shape, (dms_run, pgq_run, total, size) in shapes.items():
                spent = interleaved(dms_run, pgq_run, total, size, dms_first=n % 2 == 0)
                jobs_done = total * (BATCH if shape == "batch" else 1)
                ratios[shape].append(spent.second / spent.first)
                cpu[shape].append((spent.first_cpu / total, spent.second_cpu / total))
                line.append(
                    f"{shape}: dms {jobs_done / spent.first:,.0f} "
                    f"pgq {jobs_done / spent.second:,.0f} = {ratios[shape][-1]:.2f}x "
                    f"(CPU µs/call {cpu[shape][-1][0] * 1e6:,.0f}/{cpu[shape][-1][1] * 1e6:,.0f})"
                )
            print(f"round {n + 1}: " + " | ".join(line), flush=True)
            dms_queue.delete_kind(engine, kind)
            loop.run_until_complete(queries.clear_queue())
        summarize(ratios, cpu)


def summarize(ratios: dict[str, list[float]], cpu: dict[str, list[tuple[float, float]]]) -> None:
    """Print each shape's median ratio and the medians of both clients' CPU per call."""
    for shape, values in ratios.items():
        dms_cpu = statistics.median(c[0] for c in cpu[shape]) * 1e6
        pgq_cpu = statistics.median(c[1] for c in cpu[shape]) * 1e6
        print(
            f"{shape}: median ratio dms/pgqueuer {statistics.median(values):.2f}x "
            f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} rounds); "
            f"client CPU per call, medians: dms {dms_cpu:,.0f} µs, pgqueuer {pgq_cpu:,.0f} µs"
        )


class Spent(NamedTuple):
    """Seconds of ``first`` and ``second``: on the clock, and of this process' CPU."""

    first: float
    second: float
    first_cpu: float
    second_cpu: float


def interleaved(
    first: Callable[[int], None],
    second: Callable[[int], None],
    total: int,
    size: int,
    *,
    dms_first: bool,
) -> Spent:
    """Time each of ``first`` and ``second`` took for ``total`` calls, in turns of ``size``.

    CPU time (``time.process_time``: this process, user and system) is the client's share
    alone, which other processes' load does not move much; both clients run in this process.
    """
    spent = [0.0, 0.0]
    cpu = [0.0, 0.0]
    order = ((0, first), (1, second)) if dms_first else ((1, second), (0, first))
    done = 0
    while done < total:
        step = min(size, total - done)
        for index, run in order:
            started, started_cpu = time.perf_counter(), time.process_time()
            run(step)
            spent[index] += time.perf_counter() - started
            cpu[index] += time.process_time() - started_cpu
        done += step
    return Spent(spent[0], spent[1], cpu[0], cpu[1])


if __name__ == "__main__":
    main()
