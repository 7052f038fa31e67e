"""The ``dms`` command: tenants, migrations, status, seed data, a demo, workers and the queue.

Every operator error prints one line on stderr and exits with status 1 (2 for bad arguments);
a traceback means a bug. One module per group of commands; each adds its subcommands with
``register`` and gets a :class:`~dms.cli.context.Context` (settings resolved once, the engine
made on first use).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from sqlalchemy.exc import OperationalError

from dms.cli import dev, jobs, schema, tenants
from dms.cli.context import EXIT_ERROR, Context
from dms.config import Settings
from dms.errors import DmsError

__all__ = ["build_parser", "main"]


def _version() -> str:
    try:
        return version("dms")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dms``."""
    parser = argparse.ArgumentParser(
        prog="dms",
        description="The core of a multi-tenant document-management backend on PostgreSQL: "
        "tenants, migrations, the job queue and development helpers.",
    )
    parser.add_argument("--version", action="version", version=f"dms {_version()}")
    parser.add_argument(
        "--database-url", help="PostgreSQL URL (default: DMS_DATABASE_URL, else embedded server)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (tenants, schema, dev, jobs):
        group.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dms`` with ``argv`` and return the exit status."""
    args = build_parser().parse_args(argv)
    # Library warnings and alembic's progress lines on stderr (no-op if the caller set logging up).
    logging.basicConfig(format="%(levelname)-5.5s [%(name)s] %(message)s")
    try:
        ctx = Context(settings=Settings.from_env(), database_url=args.database_url)
        try:
            result: int = args.run(ctx, args)
        finally:
            ctx.close()
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        print(f"error: cannot use the database: {reason}", file=sys.stderr)
        return EXIT_ERROR
    except DmsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return result
