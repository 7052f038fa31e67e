"""The ``dms`` command: tenants, migrations, status, seed data, a demo, workers and the queue.

Every operator error prints one line on stderr and exits with status 1 (2 for bad arguments);
a traceback means a bug. One module per group of commands; each adds its subcommands with
``register`` and gets a :class:`~dms.cli.context.Context` (settings resolved once, the engine
made on first use).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from dms import logs
from dms.cli import (
    audit,
    blobs,
    check,
    dev,
    folders,
    health,
    importing,
    jobs,
    roles,
    rules,
    schema,
    search,
    tenants,
    trash,
)
from dms.cli.context import EXIT_ERROR, Context
from dms.cli.output import tell
from dms.config import Settings
from dms.driver_errors import INSUFFICIENT_PRIVILEGE, UNDEFINED_TABLE, sqlstate_of
from dms.errors import ConfigurationError, DmsError, NotMigrated, PermissionDenied
from dms.logs import LOG_FORMATS, LOG_LEVELS
from dms.roles import missing_privilege

__all__ = [
    "EXIT_CLOSED_PIPE",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "main",
    "parse_arguments",
]

#: Exit status when the reader of stdout closed it (128 + SIGPIPE, as a shell reports a
#: command that a closed pipe stopped).
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE
#: Exit status of a command line that the parser refuses (argparse's).
EXIT_USAGE = 2


def _version() -> str:
    try:
        return version("dms")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _log_level(args: argparse.Namespace, settings: Settings) -> str:
    if args.log_level:
        return str(args.log_level)
    by_verbosity = {0: settings.log_level, 1: "INFO"}
    return by_verbosity.get(args.verbose, "DEBUG")


class UsageError(Exception):
    """A command line that ``dms``'s parser refuses: said by :func:`parse_arguments`."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        """Keep the parser that refused (its usage line) and argparse's message."""
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusals are raised: the caller says them, as JSON if asked."""

    def error(self, message: str) -> NoReturn:
        """Raise :class:`UsageError` instead of printing and exiting."""
        raise UsageError(self, message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dms`` (its refusals raise :class:`UsageError`)."""
    parser = _Parser(
        prog="dms",
        description="The core of a multi-tenant document-management backend on PostgreSQL: "
        "tenants, migrations, the job queue and development helpers.",
    )
    parser.add_argument("--version", action="version", version=f"dms {_version()}")
    parser.add_argument(
        "--database-url", help="PostgreSQL URL (default: DMS_DATABASE_URL, else embedded server)"
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=str.upper,
        help="log lines of this level and above on stderr (default: DMS_LOG_LEVEL, else WARNING)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="-v for INFO log lines, -vv for DEBUG (unless --log-level is given)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="plain lines or one JSON object per line (default: DMS_LOG_FORMAT, else plain)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (
        tenants,
        schema,
        check,
        health,
        dev,
        folders,
        trash,
        blobs,
        jobs,
        importing,
        search,
        audit,
        roles,
        rules,
    ):
        group.register(commands)
    return parser


#: The options of ``dms`` itself that take a value (``dms alembic`` must find its own start).
_VALUED_OPTIONS = frozenset({"--database-url", "--log-level", "--log-format"})


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``argv`` (default: the command line's) as ``dms``'s parser reads it.

    Everything after ``alembic`` belongs to alembic, options included (``dms alembic -x
    tenant=acme downgrade -1``): argparse would read ``-x`` as an option of ``dms``, so the
    words after the command are set aside before parsing.
    """
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        command = _command_index(words)
        if command is None or words[command] != "alembic":
            return build_parser().parse_args(words)
        args = build_parser().parse_args(words[: command + 1])
    except UsageError as refused:
        _say_usage_error(refused, words)
        raise SystemExit(EXIT_USAGE) from None
    args.arguments = words[command + 1 :]
    return args


def _say_usage_error(refused: UsageError, words: list[str]) -> None:
    """As argparse says it (usage, then the error), or one JSON log line when JSON is asked."""
    if _json_logs_asked(words):
        logs.configure("ERROR", "json")
        tell(f"error: {refused.parser.prog}: {refused.message}")
        return
    refused.parser.print_usage(sys.stderr)
    sys.stderr.write(f"{refused.parser.prog}: error: {refused.message}\n")


def _json_logs_asked(words: list[str]) -> bool:
    """``--log-format json`` before the refusal could parse it, else ``DMS_LOG_FORMAT``."""
    for index, word in enumerate(words):
        if word.startswith("--log-format="):
            return word == "--log-format=json"
        if word == "--log-format":
            return words[index + 1 : index + 2] == ["json"]
    try:
        return Settings.from_env().log_format == "json"
    except ConfigurationError:
        return False


def _command_index(words: list[str]) -> int | None:
    """Where the command is in ``words``: the first word that is no option or option value."""
    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith("-"):
            return index
        index += 2 if word in _VALUED_OPTIONS else 1
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dms`` with ``argv`` and return the exit status."""
    args = parse_arguments(argv)
    try:
        status = _run(args)
        sys.stdout.flush()  # here, where a closed pipe can still be told apart
    except BrokenPipeError:
        # The reader went away (``dms jobs list | head -1``): nothing more to say to anyone.
        # Python would complain again while flushing stdout at exit: point it at nothing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
    return status


def _missing_grant(args: argparse.Namespace) -> str | None:
    """The grant the connected role lacks, named, if it lacks one.

    Read on a connection of its own: the failed one's transaction is over.
    """
    context = Context(settings=Settings.from_env(), database_url=args.database_url)
    try:
        with context.engine.connect() as conn:
            missing = missing_privilege(conn)
    except DBAPIError:
        return None
    finally:
        context.close()
    if missing is None:
        return None
    what = missing.schema if missing.table is None else f"{missing.schema}.{missing.table}"
    return (
        f"the role {missing.role} may not {_VERBS.get(missing.privilege, missing.privilege)} "
        f"{what}: run dms roles setup --app {missing.role} as the owner (docs/operations.md)"
    )


#: A privilege as the refusal says it.
_VERBS = {
    "SELECT": "read",
    "INSERT": "insert into",
    "UPDATE": "update",
    "DELETE": "delete from",
    "USAGE": "use the schema",
}


def _run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
        logs.configure(_log_level(args, settings), args.log_format or settings.log_format)
        ctx = Context(settings=settings, database_url=args.database_url)
        try:
            result: int = args.run(ctx, args)
        finally:
            ctx.close()
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        tell(f"error: cannot use the database: {reason}")
        return EXIT_ERROR
    except ProgrammingError as exc:
        if sqlstate_of(exc) == INSUFFICIENT_PRIVILEGE:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            tell(f"error: {_missing_grant(args) or f'the server refused: {reason}'}")
            return EXIT_ERROR
        # Every table a command reads is dms's own: a missing one means a missing migration.
        if sqlstate_of(exc) != UNDEFINED_TABLE:
            raise
        tell(f"error: {NotMigrated()}")
        return EXIT_ERROR
    except PermissionDenied as exc:
        # A right refused by the rules, or a grant missing: the catalog tells them apart.
        tell(f"error: {_missing_grant(args) or exc}")
        return EXIT_ERROR
    except DmsError as exc:
        tell(f"error: {exc}")
        return EXIT_ERROR
    return result
