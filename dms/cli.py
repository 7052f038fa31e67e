"""The ``dms`` command: tenants, migrations, status, seed data and a demo.

Every user error prints one line on stderr and exits with status 1 (2 for bad arguments);
a traceback means a bug.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from dms import migrations, tenancy
from dms.db import create_engine
from dms.errors import DmsError
from dms.users import create_users_stand_in

EXIT_OK = 0
EXIT_ERROR = 1

Command = Callable[[Engine, argparse.Namespace], int]


def _tenants_create(engine: Engine, args: argparse.Namespace) -> int:
    tenant = tenancy.create_tenant(engine, args.slug)
    print(f"created tenant {tenant.slug} (schema {tenant.schema_name})")
    return EXIT_OK


def _tenants_drop(engine: Engine, args: argparse.Namespace) -> int:
    if not args.yes:
        print(f"refusing to drop {args.slug!r} and all its data without --yes", file=sys.stderr)
        return EXIT_ERROR
    tenancy.drop_tenant(engine, args.slug)
    print(f"dropped tenant {args.slug}")
    return EXIT_OK


def _tenants_list(engine: Engine, args: argparse.Namespace) -> int:
    for tenant in tenancy.list_tenants(engine):
        print(f"{tenant.slug}\t{tenant.schema_name}\t{tenant.state}\t{tenant.created_at:%Y-%m-%d}")
    return EXIT_OK


def _migrate(engine: Engine, args: argparse.Namespace) -> int:
    migrations.upgrade(engine, args.revision, tenant=args.tenant)
    print(f"migrated {args.tenant or 'shared schema and every tenant'} to {args.revision}")
    return EXIT_OK


def _downgrade(engine: Engine, args: argparse.Namespace) -> int:
    migrations.downgrade(engine, args.revision, tenant=args.tenant)
    print(f"downgraded {args.tenant or 'every tenant and the shared schema'} to {args.revision}")
    return EXIT_OK


def _status(engine: Engine, args: argparse.Namespace) -> int:
    status = migrations.fleet_status(engine)
    print(f"head: {status.head}")
    print(f"shared schema: {status.shared_revision or 'base'}")
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


def _users_stand_in(engine: Engine, args: argparse.Namespace) -> int:
    created = create_users_stand_in(engine)
    print("created the users stand-in" if created else "a users table already exists")
    return EXIT_OK


def _seed(engine: Engine, args: argparse.Namespace) -> int:
    from dms.seed import seed  # noqa: PLC0415 -- only this command needs it

    print(seed(engine).describe())
    return EXIT_OK


def _demo(engine: Engine, args: argparse.Namespace) -> int:
    from dms.seed import run_demo  # noqa: PLC0415 -- only this command needs it

    print(run_demo(engine))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dms``."""
    parser = argparse.ArgumentParser(prog="dms", description=__doc__)
    parser.add_argument(
        "--database-url", help="PostgreSQL URL (default: DMS_DATABASE_URL, else embedded server)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tenants = commands.add_parser("tenants", help="create, drop or list tenants")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True)
    create = tenant_commands.add_parser("create", help="create a tenant at the head revision")
    create.add_argument("slug")
    create.set_defaults(run=_tenants_create)
    drop = tenant_commands.add_parser("drop", help="drop a tenant and all its data")
    drop.add_argument("slug")
    drop.add_argument("--yes", action="store_true", help="confirm that the data goes")
    drop.set_defaults(run=_tenants_drop)
    tenant_commands.add_parser("list", help="list tenants").set_defaults(run=_tenants_list)

    migrate = commands.add_parser("migrate", help="upgrade the shared schema and tenants")
    migrate.add_argument("--tenant", help="only this tenant")
    migrate.add_argument("--revision", default="head")
    migrate.set_defaults(run=_migrate)
    downgrade = commands.add_parser("downgrade", help="downgrade tenants and the shared schema")
    downgrade.add_argument("revision", help="target revision, e.g. -1 or base")
    downgrade.add_argument("--tenant", help="only this tenant")
    downgrade.set_defaults(run=_downgrade)

    commands.add_parser("status", help="every schema's revision").set_defaults(run=_status)
    users = commands.add_parser("users", help="the IAM users table")
    users_commands = users.add_subparsers(dest="users_command", required=True)
    users_commands.add_parser(
        "stand-in", help="create a development stand-in users table"
    ).set_defaults(run=_users_stand_in)
    commands.add_parser("seed", help="fill the database with development data").set_defaults(
        run=_seed
    )
    commands.add_parser("demo", help="migrate, seed and summarise").set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dms`` with ``argv`` and return the exit status."""
    args = build_parser().parse_args(argv)
    try:
        engine = create_engine(args.database_url)
        try:
            result: int = args.run(engine, args)
        finally:
            engine.dispose()
    except OperationalError as exc:
        print(f"error: cannot use the database: {exc.orig}", file=sys.stderr)
        return EXIT_ERROR
    except DmsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return result


if __name__ == "__main__":
    sys.exit(main())
