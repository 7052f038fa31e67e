"""Fairness between tenants, side by side: dms.jobs, pgqueuer, procrastinate.

    python -m bench.fairness [--url URL] [--systems dms,pgqueuer,procrastinate]
        [--bulk 20000] [--window 60] [--concurrency 4] [--handler-ms 1] [--no-analyze]
        [--every-tenant-limit N ...] [--with-limit] [--write]

Tenant ``bulk`` enqueues ``--bulk`` jobs at once; ten other tenants each enqueue one job per
second; every system's worker runs ``--concurrency`` handlers at a time, each sleeping
``--handler-ms``. Reported per system and configuration: the ten tenants' enqueue-to-start
waits (p50, p99, max) and how many of their jobs had not started, and the bulk's drain rate,
against the same system draining the bulk alone and against dms.jobs' Worker alone.

dms.jobs runs until the backlog is drained (:mod:`bench.fairness.dms_side`). pgqueuer and
procrastinate cannot drain 200,000 jobs in a sane time: their runs last ``--window`` seconds
(the trickle's length), their drain rate is over that window, and a small tenant's job that
had not started by its end counts as not started, its wait so far a lower bound. Their tables
are analyzed once the backlog is in, as autovacuum would within a minute or so (``--no-analyze``
leaves them planned as an empty queue: pgqueuer's dequeue then took 67 ms instead of 0.35 ms
over 200,000 jobs). dms.jobs' table is left as it is, as ``bench.jobs`` leaves it.
"""

from __future__ import annotations

import argparse
import importlib
import platform
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.engine import URL

from bench.fairness.common import Outcome, Scenario
from dms.db import normalize_url

RESULTS = Path(__file__).resolve().parent.parent / "results" / "fairness.md"
SYSTEMS = ("dms", "pgqueuer", "procrastinate")


def _runner(system: str) -> Callable[[URL, Scenario], list[Outcome]]:
    # Imported on demand: the competitors are only in the bench dependency group.
    module = importlib.import_module(f"bench.fairness.{system}_side")
    run: Callable[[URL, Scenario], list[Outcome]] = module.run
    return run


def main() -> None:
    """Run the chosen systems in turn and print (or ``--write``) the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--bulk", type=int, default=20_000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds (not for dms)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--handler-ms", type=float, default=1.0)
    parser.add_argument(
        "--no-analyze",
        action="store_true",
        help="leave pgqueuer's and procrastinate's tables unanalyzed after the bulk enqueue",
    )
    parser.add_argument(
        "--with-limit",
        action="store_true",
        help="dms.jobs also with the bulk limited to 3 running (slow: use a --bulk of 10000)",
    )
    parser.add_argument(
        "--every-tenant-limit",
        type=int,
        action="append",
        default=[],
        help="dms.jobs also with every tenant limited to this many running (repeatable)",
    )
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"unknown systems {unknown}; choose among {', '.join(SYSTEMS)}")
    scenario = Scenario(
        bulk=args.bulk,
        concurrency=args.concurrency,
        handler_ms=args.handler_ms,
        window_s=args.window,
        analyze=not args.no_analyze,
        with_limit=args.with_limit,
        every_tenant_limits=tuple(args.every_tenant_limit),
    )
    server = normalize_url(args.url)
    started = datetime.now(timezone.utc)
    outcomes: list[Outcome] = []
    for system in systems:
        print(f"{system} ...", flush=True)
        for outcome in _runner(system)(server, scenario):
            print(f"  {_row(outcome, outcomes)}", flush=True)
            outcomes.append(outcome)
    text = table(scenario, outcomes, started)
    print(text)
    if args.write:
        RESULTS.write_text(text)


def table(scenario: Scenario, outcomes: list[Outcome], started: datetime) -> str:
    """The markdown table of ``outcomes``, one row per run, with how they were run."""
    return "\n".join(
        [
            "# Fairness between tenants (`python -m bench.fairness`, one run)",
            "",
            f"Run {started:%Y-%m-%d %H:%M} UTC on {platform.node()} ({platform.python_version()}).",
            f"Tenant `bulk` enqueues {scenario.bulk:,} jobs at once, then ten tenants enqueue one "
            f"job per second each; every worker runs {scenario.concurrency} handlers at a time, "
            f"each sleeping {scenario.handler_ms:g} ms. dms.jobs runs until the backlog is "
            "drained; pgqueuer and procrastinate for "
            f"{scenario.window_s:g} s each (drain rate over that window; a small tenant's job "
            "not started by its end counts as not started, and a wait marked > is a lower "
            "bound), their tables "
            + ("analyzed" if scenario.analyze else "not analyzed")
            + " once the backlog was in.",
            "",
            "| system | configuration | bulk drained (jobs/s) | vs its bulk alone "
            "| vs dms.jobs alone | small tenants' jobs | not started "
            "| their wait p50 / p99 / max (ms) |",
            "|---|---|---|---|---|---|---|---|",
            *(f"| {_row(outcome, outcomes)} |" for outcome in outcomes),
            "",
        ]
    )


def _row(outcome: Outcome, outcomes: list[Outcome]) -> str:
    alone = _alone(outcome.system, outcomes)
    dms_alone = _alone("dms.jobs", outcomes)
    drained = f"{outcome.drain_per_s:,.0f}" + ("" if outcome.drained else " (not drained)")
    cells = [
        outcome.system,
        outcome.configuration if outcome.trickle else "bulk alone",
        drained,
        _ratio(outcome, alone) if outcome.trickle else "",
        _ratio(outcome, dms_alone),
    ]
    if outcome.trickle:
        waits = " / ".join(_wait(outcome, share) for share in (0.5, 0.99, 1.0))
        cells += [f"{outcome.small_jobs:,}", f"{len(outcome.unstarted_ms):,}", waits]
    else:
        cells += ["", "", ""]
    return " | ".join(cells)


def _alone(system: str, outcomes: list[Outcome]) -> Outcome | None:
    return next((o for o in outcomes if o.system == system and not o.trickle), None)


def _ratio(outcome: Outcome, base: Outcome | None) -> str:
    if base is None or base.drain_per_s <= 0:
        return "-"
    return f"{outcome.drain_per_s / base.drain_per_s:.2f}x"


def _wait(outcome: Outcome, share: float) -> str:
    value, lower_bound = outcome.wait_ms(share)
    return f"> {value:,.0f}" if lower_bound else f"{value:,.1f}"
