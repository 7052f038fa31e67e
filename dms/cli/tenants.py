"""``dms tenants create|drop|list|move``: one tenant or thousands at once; moving one (Citus)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from dms import blobs, placement, provisioning, tenancy
from dms.cli.arguments import add_blobs_option
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.fleet import add_jobs_option, jobs_of, print_problems, progress, read_names, run_fleet
from dms.cli.output import add_json_flag, confirmed, emit_json, tell
from dms.errors import StorageError, TenantExists
from dms.fleet.report import FleetReport, Outcome
from dms.storage import content_space

_NAMES_HELP = "tenant keys: 1 to 40 characters a-z, 0-9 and _, starting with a letter"
_FILE_HELP = "also the tenant keys in FILE, one per line (- for standard input)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``tenants`` and its subcommands to ``commands``."""
    tenants = commands.add_parser("tenants", help="create, drop, list or move tenants")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True)
    create = tenant_commands.add_parser(
        "create", help="create tenants at the head revision, each on its own"
    )
    create.add_argument("slugs", nargs="*", metavar="NAME", help=_NAMES_HELP)
    create.add_argument("-f", "--file", help=_FILE_HELP)
    create.add_argument(
        "--if-not-exists",
        action="store_true",
        help="a tenant that exists is not an error (how an interrupted run is finished)",
    )
    add_jobs_option(create)
    add_json_flag(create)
    create.set_defaults(run=_create)

    drop = tenant_commands.add_parser("drop", help="drop tenants and all their data")
    drop.add_argument("slugs", nargs="*", metavar="NAME", help=_NAMES_HELP)
    drop.add_argument("-f", "--file", help=_FILE_HELP)
    drop.add_argument("--all", action="store_true", help="every registered tenant")
    drop.add_argument("--yes", action="store_true", help="confirm that the data goes")
    drop.add_argument(
        "--dry-run", action="store_true", help="only say which tenants and blobs would go"
    )
    add_blobs_option(drop)
    drop.add_argument(
        "--if-exists",
        action="store_true",
        help="a tenant that does not exist is not an error (how an interrupted run is finished)",
    )
    add_jobs_option(drop)
    add_json_flag(drop)
    drop.set_defaults(run=_drop)

    move = tenant_commands.add_parser(
        "move",
        help="move a tenant to another node of a Citus cluster (citus_schema_move)",
        description="Citus copies the tenant's schema to the node, switches it and drops the "
        "old copy; work on the tenant goes on (its writes wait during the copy).",
    )
    move.add_argument("slug", metavar="NAME", help="the tenant's key")
    move.add_argument("--to", required=True, metavar="HOST:PORT", help="the node, as in dms status")
    move.set_defaults(run=_move)

    listing = tenant_commands.add_parser("list", help="list tenants")
    add_json_flag(listing)
    listing.set_defaults(run=_list)


def _names(args: argparse.Namespace) -> list[str] | None:
    names = read_names(args.slugs, args.file)
    if names:
        return names
    tell("error: give tenant names, or --file FILE (- for standard input)")
    return None


def _again(args: argparse.Namespace, command: str, flag: str) -> list[str]:
    """The arguments that run ``command`` again over the same names, done ones skipped."""
    again = ["tenants", command, flag]
    if command == "drop":
        again += ["--all"] if args.all else []
        again += ["--yes"]
    if args.file is not None:
        again += ["--file", args.file]
    again += args.slugs
    return again + ([] if args.jobs is None else ["--jobs", str(args.jobs)])


def _create(ctx: Context, args: argparse.Namespace) -> int:
    names = _names(args)
    if names is None:
        return EXIT_ERROR
    outcome = run_fleet(
        ctx,
        lambda: provisioning.create_tenants(
            ctx.engine,
            names,
            jobs=jobs_of(args),
            progress=progress("create"),
            if_not_exists=args.if_not_exists,
        ),
        lambda _report: _again(args, "create", "--if-not-exists"),
        as_json=args.json,
    )
    if isinstance(outcome, int):
        return outcome
    return _conclude(outcome, args.json, _created_line)


def _created_line(report: FleetReport) -> str:
    if len(report.tenants) == 1 and report.count(Outcome.CREATED) == 1:
        slug = report.tenants[0].tenant
        return f"created tenant {slug} (schema {tenancy.schema_name(slug)})"
    return f"created {report.count(Outcome.CREATED)} tenant(s){_others(report)}"


def _drop(ctx: Context, args: argparse.Namespace) -> int:
    if args.all and (args.slugs or args.file):
        tell("error: give tenant names or --all, not both")
        return EXIT_ERROR
    names = [t.slug for t in tenancy.list_tenants(ctx.engine)] if args.all else _names(args)
    if names is None:
        return EXIT_ERROR
    if args.dry_run:
        return _dry_drop(ctx, args, names)
    what = "every tenant" if args.all else _named(names)
    if not confirmed(args, f"drop {what} and all {_its(names)} data"):
        return EXIT_ERROR
    outcome = run_fleet(
        ctx,
        lambda: provisioning.drop_tenants(
            ctx.engine,
            names,
            jobs=jobs_of(args),
            progress=progress("drop"),
            if_exists=args.if_exists,
        ),
        lambda _report: _again(args, "drop", "--if-exists"),
        as_json=args.json,
    )
    if isinstance(outcome, int):
        return outcome
    dropped = [r.tenant for r in outcome.tenants if r.outcome is Outcome.DROPPED]
    released = _release_blobs(ctx, args.blobs, dropped)
    status = _conclude(
        outcome,
        args.json,
        lambda report: f"{_dropped_line(report)}; {released or 0} blob(s) released",
        blobs_released=released,
    )
    return EXIT_ERROR if released is None else status


def _dry_drop(ctx: Context, args: argparse.Namespace, names: list[str]) -> int:
    """What ``tenants drop`` would drop: the registered ones among ``names``, their blobs."""
    with ctx.engine.connect() as conn:
        registered = tenancy.registered_slugs(conn, names)
    store = ctx.store(args.blobs)
    blobs_of = {
        name: sum(1 for _ in store.objects(content_space(name))) for name in sorted(registered)
    }
    missing = sorted(set(names) - registered)
    if args.json:
        emit_json(
            {
                "dry_run": True,
                "tenants": [{"tenant": name, "blobs": count} for name, count in blobs_of.items()],
                "not_found": missing,
            }
        )
    else:
        print(
            f"would drop {len(blobs_of)} tenant(s) and {sum(blobs_of.values())} blob(s) from "
            f"{store.location}" + (f"; {len(missing)} not found" if missing else "")
        )
    return EXIT_OK


def _release_blobs(ctx: Context, location: str | None, dropped: list[str]) -> int | None:
    """Delete the dropped tenants' blobs from the store; ``None`` (said) if the store failed."""
    if not dropped:
        return 0
    released = 0
    store = ctx.store(location)
    for tenant in dropped:
        try:
            released += blobs.release_dropped_tenant(ctx.engine, store, tenant)
        except (StorageError, TenantExists) as exc:
            tell(f"error: the blobs of tenant {tenant} stay: {exc}; `dms blobs gc` releases them")
            return None
    return released


def _named(names: list[str]) -> str:
    return repr(names[0]) if len(names) == 1 else f"{len(names)} tenants"


def _its(names: list[str]) -> str:
    return "its" if len(names) == 1 else "their"


def _dropped_line(report: FleetReport) -> str:
    if len(report.tenants) == 1 and report.count(Outcome.DROPPED) == 1:
        return f"dropped tenant {report.tenants[0].tenant}"
    return f"dropped {report.count(Outcome.DROPPED)} tenant(s){_others(report)}"


def _others(report: FleetReport) -> str:
    others = {k: v for k, v in report.summary().items() if k not in ("created", "dropped")}
    return (
        "; " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in others.items()) if others else ""
    )


def _conclude(
    report: FleetReport, as_json: bool, line: Callable[[FleetReport], str], **more: object
) -> int:
    if as_json:
        emit_json(report.as_json() | more)
    else:
        print_problems(report)
        if len(report.tenants) > 1 or not report.problems:
            print(line(report))
    return EXIT_ERROR if report.problems else EXIT_OK


def _tenant_row(tenant: tenancy.Tenant) -> dict[str, object]:
    # "tenant", as in every other JSON document of dms (the library's field is `slug`).
    return {
        "tenant": tenant.slug,
        "schema_name": tenant.schema_name,
        "state": tenant.state,
        "created_at": tenant.created_at,
    }


def _move(ctx: Context, args: argparse.Namespace) -> int:
    source = placement.move_tenant(ctx.engine, args.slug, args.to)
    if source.name == args.to:
        print(f"tenant {args.slug} is already on {args.to}")
    else:
        print(f"moved tenant {args.slug} from {source.name} to {args.to}")
    return EXIT_OK


def _list(ctx: Context, args: argparse.Namespace) -> int:
    tenants = tenancy.list_tenants(ctx.engine)
    if args.json:
        emit_json({"tenants": [_tenant_row(tenant) for tenant in tenants]})
        return EXIT_OK
    for tenant in tenants:
        print(f"{tenant.slug}\t{tenant.schema_name}\t{tenant.state}\t{tenant.created_at:%Y-%m-%d}")
    return EXIT_OK
