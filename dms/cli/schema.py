"""``dms migrate``, ``downgrade``, ``status`` and ``alembic``: the revisions of the schemas."""

from __future__ import annotations

import argparse
import logging

from alembic.config import CommandLine
from alembic.util import CommandError

from dms import migrations
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.errors import MigrationError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the migration commands to ``commands``."""
    migrate = commands.add_parser("migrate", help="upgrade the shared schema and tenants")
    migrate.add_argument("--tenant", help="only this tenant")
    migrate.add_argument("--revision", default="head", help="target revision (default head)")
    migrate.set_defaults(run=_migrate)
    downgrade = commands.add_parser("downgrade", help="downgrade tenants and the shared schema")
    downgrade.add_argument("revision", help="target revision, e.g. -1 or base")
    downgrade.add_argument("--tenant", help="only this tenant")
    downgrade.set_defaults(run=_downgrade)
    status = commands.add_parser("status", help="every schema's revision; exit 1 unless all ok")
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
    migrations.upgrade(ctx.engine, args.revision, tenant=args.tenant)
    print(f"migrated {args.tenant or 'shared schema and every tenant'} to {args.revision}")
    return EXIT_OK


def _downgrade(ctx: Context, args: argparse.Namespace) -> int:
    migrations.downgrade(ctx.engine, args.revision, tenant=args.tenant)
    print(f"downgraded {args.tenant or 'every tenant and the shared schema'} to {args.revision}")
    return EXIT_OK


def _status(ctx: Context, args: argparse.Namespace) -> int:
    status = migrations.fleet_status(ctx.engine)
    print(f"head: {status.head}")
    shared_note = "" if status.shared_revision == status.head else " (not at head)"
    print(f"shared schema: {status.shared_revision or 'base'}{shared_note}")
    for item in status.tenants:
        problems = [
            text
            for text, bad in (
                ("not at head", not item.at_head),
                ("schema missing", not item.schema_exists),
                ("not registered", not item.registered),
            )
            if bad
        ]
        state = ", ".join(problems) or "ok"
        print(f"{item.slug}\t{item.schema_name}\t{item.revision or 'base'}\t{state}")
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
