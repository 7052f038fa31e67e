"""``dms migrate``, ``downgrade``, ``status`` and ``alembic``: the revisions of the schemas."""

from __future__ import annotations

import argparse
import logging

from alembic.config import CommandLine
from alembic.util import CommandError

from dms import migrations, tenancy
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.fleet import add_jobs_option, jobs_of, progress, run_fleet
from dms.cli.output import add_json_flag, confirmed, emit_json, tell
from dms.errors import MigrationError, MigrationFailed
from dms.fleet.interrupts import sigterm_as_interrupt
from dms.fleet.report import FleetReport, Outcome


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the migration commands to ``commands``."""
    migrate = commands.add_parser("migrate", help="upgrade the shared schema, then every tenant")
    migrate.add_argument("--tenant", help="only this tenant (its key)")
    migrate.add_argument(
        "--revision",
        default="head",
        help="target revision: head (default), an id such as 0003, or relative: +1, head-1",
    )
    add_jobs_option(migrate)
    add_json_flag(migrate)
    migrate.set_defaults(run=_migrate)
    downgrade = commands.add_parser(
        "downgrade", help="downgrade every tenant, then the shared schema"
    )
    downgrade.add_argument(
        "revision", help="target revision: an id such as 0002, base, or relative: -1"
    )
    downgrade.add_argument("--tenant", help="only this tenant (its key)")
    downgrade.add_argument(
        "--yes", action="store_true", help="confirm a downgrade to base, which drops all data"
    )
    add_jobs_option(downgrade)
    add_json_flag(downgrade)
    downgrade.set_defaults(run=_downgrade)
    status = commands.add_parser("status", help="every schema's revision; exit 1 unless all ok")
    add_json_flag(status)
    status.set_defaults(run=_status)
    alembic = commands.add_parser(
        "alembic",
        help="run alembic with dms's migrations, no alembic.ini needed",
        description="Plain alembic (upgrade, downgrade, current, history, check, ...) on dms's "
        "migration scripts, wherever dms is installed; --database-url and DMS_DATABASE_URL "
        "pick the database as for every dms command.",
        add_help=False,
    )
    alembic.add_argument("arguments", nargs=argparse.REMAINDER, help="alembic's arguments")
    alembic.set_defaults(run=_alembic)


def _migrate(ctx: Context, args: argparse.Namespace) -> int:
    return _run(ctx, args, "upgrade", args.revision)


def _downgrade(ctx: Context, args: argparse.Namespace) -> int:
    target = migrations.downgrade_target(ctx.engine, args.revision, tenant=args.tenant)
    if target is None and not confirmed(args, "downgrade to base", _destroyed(ctx, args)):
        return EXIT_ERROR
    return _run(ctx, args, "downgrade", args.revision)


def _destroyed(ctx: Context, args: argparse.Namespace) -> str:
    """What a downgrade to base destroys, for the refusal."""
    if args.tenant is not None:
        return f"it drops every table of tenant {args.tenant!r} and all its data"
    count = len(tenancy.list_tenants(ctx.engine))
    return (
        f"it drops every table of every tenant ({count}) and all their data, the tenant "
        "registry and the job queue"
    )


def _run(ctx: Context, args: argparse.Namespace, direction: str, revision: str) -> int:
    migrate = migrations.upgrade if direction == "upgrade" else migrations.downgrade
    try:
        outcome = run_fleet(
            ctx,
            lambda: migrate(
                ctx.engine,
                revision,
                tenant=args.tenant,
                jobs=jobs_of(args),
                progress=progress("migrate" if direction == "upgrade" else "downgrade"),
            ),
            lambda report: _again(args, direction, report),
            as_json=args.json,
        )
    except MigrationFailed as failed:
        if not args.json or failed.report is None:
            raise
        emit_json(failed.report.as_json())
        return EXIT_ERROR
    if isinstance(outcome, int):
        return outcome
    if args.json:
        emit_json(outcome.as_json())
    else:
        print(_done_line(args, direction, outcome))
    return EXIT_OK


def _again(args: argparse.Namespace, direction: str, report: FleetReport) -> list[str]:
    """The command that finishes ``report``'s run: the same, with the absolute target."""
    target = report.target or "base"
    again = ["migrate", "--revision", target] if direction == "upgrade" else ["downgrade", target]
    again += [] if args.tenant is None else ["--tenant", args.tenant]
    return again + ([] if args.jobs is None else ["--jobs", str(args.jobs)])


def _done_line(args: argparse.Namespace, direction: str, report: FleetReport) -> str:
    if direction == "upgrade":
        what = args.tenant or "shared schema and every tenant"
        verb = "migrated"
    else:
        what = args.tenant or "every tenant and the shared schema"
        verb = "downgraded"
    moved, skipped = report.count(Outcome.MIGRATED), report.count(Outcome.SKIPPED)
    return (
        f"{verb} {what} to {report.target or 'base'}: {moved} tenant(s) moved, "
        f"{skipped} already there"
    )


def _status(ctx: Context, args: argparse.Namespace) -> int:
    with sigterm_as_interrupt() as signals:
        try:
            status = migrations.fleet_status(ctx.engine, progress=progress("status"))
        except KeyboardInterrupt:
            tell("interrupted; nothing was changed: run dms status again", level=logging.WARNING)
            return signals.exit_status
    if args.json:
        emit_json(status.as_json())
        return EXIT_OK if status.healthy else EXIT_ERROR
    print(f"head: {status.head}")
    shared_note = "" if status.shared_revision == status.head else " (not at head)"
    print(f"shared schema: {status.shared_revision or 'base'}{shared_note}")
    for item in status.tenants:
        state = ", ".join(item.problems) or "ok"
        node = "" if item.node is None else f"\t{item.node}"
        print(f"{item.slug}\t{item.schema_name}\t{item.revision or 'base'}\t{state}{node}")
    for node, count in status.tenants_by_node.items():
        print(f"node {node}: {count} tenant(s)")
    print(f"{len(status.tenants)} tenant(s); {'all at head' if status.healthy else 'ATTENTION'}")
    return EXIT_OK if status.healthy else EXIT_ERROR


def _alembic(ctx: Context, args: argparse.Namespace) -> int:
    """Alembic's own command line, with the configuration that an ``alembic.ini`` would give."""
    command_line = CommandLine(prog="dms alembic")
    options = command_line.parser.parse_args(args.arguments)
    if not hasattr(options, "cmd"):
        command_line.parser.error("too few arguments")
    config = migrations.alembic_config(ctx.database_url, cmd_opts=options)
    # What alembic.ini's logging sections give plain alembic: its progress lines on stderr.
    logging.getLogger("alembic").setLevel(logging.INFO)
    function, positional, keywords = options.cmd
    try:
        function(
            config,
            *(getattr(options, name, None) for name in positional),
            **{name: getattr(options, name, None) for name in keywords},
        )
    # What alembic's own command line prints as "FAILED: ..." (exit status 255): one line.
    except CommandError as exc:
        raise MigrationError(str(exc)) from exc
    return EXIT_OK
