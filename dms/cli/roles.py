"""``dms roles setup``: the application's role, granted exactly what it needs."""

from __future__ import annotations

import argparse

from dms import roles
from dms.cli.context import EXIT_OK, Context


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``roles`` and its subcommands to ``commands``."""
    group = commands.add_parser(
        "roles", help="the application's role: create or adopt it, grant what it needs"
    )
    actions = group.add_subparsers(dest="roles_command", required=True)
    setup = actions.add_parser(
        "setup",
        help="create or adopt the application's role and grant it exactly what it needs",
        description="Run as the owner (the role that migrates). Creates ROLE (LOGIN, no "
        "password: set its authentication on the server) or adopts it if it is no superuser, "
        "no BYPASSRLS role and owns nothing of dms; records it, so that every tenant created "
        "or migrated later is granted to it in the same transaction; takes back what it held "
        "on dms's schemas and grants the shared schema and every tenant: rows read and "
        "written, no DDL (docs/operations.md, Roles). Idempotent; dms check reports a "
        "privilege missing or in excess.",
    )
    setup.add_argument("--app", required=True, metavar="ROLE", help="the application's role")
    setup.set_defaults(run=_setup)


def _setup(ctx: Context, args: argparse.Namespace) -> int:
    granted = roles.setup(ctx.engine, roles.check_role_name(args.app))
    print(f"role {args.app}: the application's; granted the shared schema and {granted} tenant(s)")
    return EXIT_OK
