"""``dms tenants create|drop|list``."""

from __future__ import annotations

import argparse
import sys

from dms import tenancy
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``tenants`` and its subcommands to ``commands``."""
    tenants = commands.add_parser("tenants", help="create, drop or list tenants")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True)
    create = tenant_commands.add_parser("create", help="create a tenant at the head revision")
    create.add_argument("slug", help="tenant key: a-z, 0-9 and _, starting with a letter")
    create.set_defaults(run=_create)
    drop = tenant_commands.add_parser("drop", help="drop a tenant and all its data")
    drop.add_argument("slug", help="tenant key")
    drop.add_argument("--yes", action="store_true", help="confirm that the data goes")
    drop.set_defaults(run=_drop)
    tenant_commands.add_parser("list", help="list tenants").set_defaults(run=_list)


def _create(ctx: Context, args: argparse.Namespace) -> int:
    tenant = tenancy.create_tenant(ctx.engine, args.slug, settings=ctx.settings)
    print(f"created tenant {tenant.slug} (schema {tenant.schema_name})")
    return EXIT_OK


def _drop(ctx: Context, args: argparse.Namespace) -> int:
    if not args.yes:
        print(f"refusing to drop {args.slug!r} and all its data without --yes", file=sys.stderr)
        return EXIT_ERROR
    tenancy.drop_tenant(ctx.engine, args.slug, settings=ctx.settings)
    print(f"dropped tenant {args.slug}")
    return EXIT_OK


def _list(ctx: Context, args: argparse.Namespace) -> int:
    for tenant in tenancy.list_tenants(ctx.engine):
        print(f"{tenant.slug}\t{tenant.schema_name}\t{tenant.state}\t{tenant.created_at:%Y-%m-%d}")
    return EXIT_OK
