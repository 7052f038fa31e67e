"""``dms jobs schedules``, ``dms jobs schedule NAME`` and ``dms jobs unschedule NAME``.

Periodic jobs (:mod:`dms.jobs.schedules`) registered from the command line; schedules that an
app registers in code are listed and removed the same way.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from dms import jobs
from dms.cli.arguments import duration, json_value, positive
from dms.cli.context import EXIT_OK, Context
from dms.cli.output import add_json_flag, emit_json
from dms.jobs.enqueue import DEFAULT_MAX_ATTEMPTS
from dms.jobs.schedules import CATCH_UP, CRON_FORM, NEVER


def register(job_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``schedules``, ``schedule`` and ``unschedule`` to ``dms jobs``."""
    listing = job_commands.add_parser("schedules", help="periodic jobs with their next run")
    add_json_flag(listing)
    listing.set_defaults(run=_list)
    schedule = job_commands.add_parser(
        "schedule", help="enqueue a job at every tick of a cron expression (add or replace)"
    )
    schedule.add_argument("name", help="the schedule's name (replaces one of that name)")
    schedule.add_argument(
        "--cron",
        required=True,
        help=f"{CRON_FORM}; any other number of fields is refused",
    )
    schedule.add_argument("--kind", required=True, help="the kind of the jobs it enqueues")
    schedule.add_argument("--tenant", required=True, help="the tenant the jobs work for")
    schedule.add_argument(
        "--payload", type=json_value, default={}, help="the jobs' payload as JSON (default {})"
    )
    schedule.add_argument(
        "--timezone", default="UTC", help="read the cron expression in this zone (UTC)"
    )
    schedule.add_argument("--priority", type=int, default=0, help="smaller runs first (0)")
    schedule.add_argument(
        "--max-attempts",
        type=positive,
        default=DEFAULT_MAX_ATTEMPTS,
        help=f"claims before a job goes dead ({DEFAULT_MAX_ATTEMPTS})",
    )
    schedule.add_argument(
        "--catch-up",
        type=duration,
        default=CATCH_UP,
        help="ticks missed while no worker ran are still enqueued up to this old (10m)",
    )
    add_json_flag(schedule)
    schedule.set_defaults(run=_schedule)
    unschedule = job_commands.add_parser(
        "unschedule", help="remove a schedule (the jobs it enqueued stay)"
    )
    unschedule.add_argument("name", help="the schedule's name")
    unschedule.set_defaults(run=_unschedule)


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.connect() as conn:
        states = jobs.list_schedules(conn)
    if args.json:
        emit_json({"schedules": states})
        return EXIT_OK
    for state in states:
        s = state.schedule
        print(
            f"{s.name}\t{s.cron}\t{s.timezone}\t{s.kind}\t{s.tenant}\t"
            f"next {_when(state.next_run_at)}\tlast {_when(state.last_tick_at)}"
            + (
                ""
                if state.skipped_until is None
                else f"\tskipped until {_when(state.skipped_until)}"
            )
        )
    print(f"{len(states)} schedule(s)")
    return EXIT_OK


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return "never" if moment == NEVER else moment.isoformat(timespec="seconds")


def _schedule(ctx: Context, args: argparse.Namespace) -> int:
    schedule = jobs.Schedule(
        name=args.name,
        cron=args.cron,
        kind=args.kind,
        tenant=args.tenant,
        payload=args.payload,
        timezone=args.timezone,
        priority=args.priority,
        max_attempts=args.max_attempts,
        catch_up=args.catch_up,
    )
    with ctx.engine.begin() as conn:
        jobs.register_schedules(conn, [schedule])
        (state,) = [s for s in jobs.list_schedules(conn) if s.schedule.name == args.name]
    if args.json:
        emit_json(state)
    else:
        print(
            f"schedule {args.name}: {args.cron} ({args.timezone}), next {_when(state.next_run_at)}"
        )
    return EXIT_OK


def _unschedule(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.begin() as conn:
        jobs.remove_schedule(conn, args.name)
    print(f"removed schedule {args.name}; the jobs it enqueued stay")
    return EXIT_OK
