"""``dms jobs limits``, ``dms jobs limit TENANT`` and ``dms jobs unlimit TENANT``.

Per-tenant limits of the job queue (:mod:`dms.jobs.limits`) from the command line: how many of a
tenant's jobs (of every kind, or of one ``--kind``) run at once and start a second. A change
holds from the next claim of every worker; none restarts.
"""

from __future__ import annotations

import argparse

from dms import jobs
from dms.cli.context import EXIT_OK, Context
from dms.cli.output import add_json_flag, emit_json


def register(job_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``limits``, ``limit`` and ``unlimit`` to ``dms jobs``."""
    listing = job_commands.add_parser(
        "limits", help="per-tenant limits, with the jobs each counts running now"
    )
    listing.add_argument("--tenant", help="only this tenant's limits")
    add_json_flag(listing)
    listing.set_defaults(run=_list)
    limit = job_commands.add_parser(
        "limit", help="limit a tenant's jobs running at once and started a second (set or replace)"
    )
    limit.add_argument("tenant", help="the tenant whose jobs are limited")
    limit.add_argument("--kind", help="only the jobs of this kind (default: of every kind)")
    limit.add_argument(
        "--max-running", type=int, help="at most this many running at once (0 pauses them)"
    )
    limit.add_argument(
        "--per-second", type=float, help="at most this many started a second (may be below 1)"
    )
    limit.set_defaults(run=_limit)
    unlimit = job_commands.add_parser(
        "unlimit", help="remove a tenant's limit (of every kind, or of --kind)"
    )
    unlimit.add_argument("tenant", help="the tenant")
    unlimit.add_argument("--kind", help="the limit of this kind (default: of every kind)")
    unlimit.set_defaults(run=_unlimit)


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.connect() as conn:
        states = jobs.list_limits(conn, tenant=args.tenant)
    if args.json:
        emit_json({"limits": states})
        return EXIT_OK
    for state in states:
        print(
            f"{state.limit.tenant}\t{_kind(state.limit.kind)}\t{_terms(state.limit)}\t"
            f"running {state.running}"
        )
    print(f"{len(states)} limit(s)")
    return EXIT_OK


def _limit(ctx: Context, args: argparse.Namespace) -> int:
    limit = jobs.Limit(
        tenant=args.tenant,
        kind=args.kind,
        max_running=args.max_running,
        per_second=args.per_second,
    )
    with ctx.engine.begin() as conn:
        jobs.set_limit(conn, limit)
    print(f"limited {limit.tenant} ({_kind(limit.kind)}): {_terms(limit)}")
    return EXIT_OK


def _unlimit(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.begin() as conn:
        jobs.remove_limit(conn, args.tenant, kind=args.kind)
    print(f"removed the limit of {args.tenant} ({_kind(args.kind)})")
    return EXIT_OK


def _kind(kind: str | None) -> str:
    return "every kind" if kind is None else f"kind {kind}"


def _terms(limit: jobs.Limit) -> str:
    terms = []
    if limit.max_running is not None:
        terms.append(f"at most {limit.max_running} running")
    if limit.per_second is not None:
        terms.append(f"at most {limit.per_second:g} started a second")
    return ", ".join(terms)
