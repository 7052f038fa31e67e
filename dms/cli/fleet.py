"""How every fleet command runs: ``--jobs``, progress, ``--json``, and being stopped.

A fleet command (``dms tenants create|drop``, ``migrate``, ``downgrade``, ``status``,
``check``) shows a progress bar on a terminal and log lines elsewhere. Stopped by Ctrl-C (or
SIGTERM), it prints how far it got and the command that finishes the job, and exits 130
(143); stopped because the database went away or a worker died, the same with exit status 1.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import make_url

from dms.cli.arguments import positive
from dms.cli.context import EXIT_ERROR, Context
from dms.cli.output import emit_json, tell
from dms.errors import FleetInterrupted, FleetStopped, ValidationError
from dms.fleet.arguments import AUTO_JOBS, Jobs
from dms.fleet.interrupts import sigterm_as_interrupt
from dms.fleet.progress import Progress, progress_for
from dms.fleet.report import FleetReport

#: Builds the command that finishes an operation, from its report (the absolute target).
Finisher = Callable[[FleetReport], list[str]]


def add_jobs_option(parser: argparse.ArgumentParser) -> None:
    """Give a fleet command ``--jobs N``."""
    parser.add_argument(
        "--jobs",
        type=positive,
        help="worker processes, each with its own connection (default: 1 below 32 tenants, "
        "else the CPUs here, at most 8 and half the server's free connections)",
    )


def jobs_of(args: argparse.Namespace) -> Jobs:
    """The processes of ``--jobs``; without it, as many as the number of tenants calls for."""
    return AUTO_JOBS if args.jobs is None else int(args.jobs)


def progress(label: str) -> Progress:
    """A bar on a terminal; log lines (shown whatever the log level) elsewhere."""
    fleet_log = logging.getLogger("dms.fleet")
    if fleet_log.level == logging.NOTSET or fleet_log.level > logging.INFO:
        fleet_log.setLevel(logging.INFO)
    return progress_for(label)


def read_names(names: list[str], file: str | None) -> list[str]:
    """Tenant names from the command line and from ``file`` (``-``: standard input).

    Raises :class:`~dms.errors.ValidationError` if ``file`` cannot be read. Bytes that are not
    UTF-8 stay in their line as lone surrogates: that name is refused, the others go on.
    """
    found = list(names)
    if file is not None:
        try:
            data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ValidationError(f"cannot read tenant names from {file!r}: {reason}") from exc
        text = data.decode("utf-8", errors="surrogateescape")
        found += [line.strip() for line in text.splitlines() if line.strip()]
    return found


def command_line(ctx: Context, *arguments: str) -> str:
    """``dms <arguments>`` as typed, with ``--database-url`` (its password hidden) if given."""
    argv = ["dms"]
    if ctx.database_url:
        argv += ["--database-url", make_url(ctx.database_url).render_as_string()]
    return shlex.join([*argv, *arguments])


def run_fleet(
    ctx: Context,
    operation: Callable[[], FleetReport],
    finish: Finisher,
    *,
    as_json: bool,
) -> FleetReport | int:
    """Run ``operation``; its report, or the exit status after saying how it was stopped."""
    with sigterm_as_interrupt() as signals:
        try:
            return operation()
        except FleetInterrupted as interrupted:
            _stopped(
                ctx, interrupted.report, finish, f"interrupted: {interrupted.report.how_far()}"
            )
            return signals.exit_status
        except FleetStopped as stopped:
            _stopped(ctx, stopped.report, finish, f"error: {stopped}", as_json=as_json)
            return EXIT_ERROR
        except KeyboardInterrupt:
            tell("interrupted before any tenant was changed", level=logging.WARNING)
            return signals.exit_status


def _stopped(
    ctx: Context,
    report: FleetReport,
    finish: Finisher,
    first: str,
    *,
    as_json: bool = False,
) -> None:
    if as_json:
        emit_json(report.as_json())
    level = logging.ERROR if first.startswith("error:") else logging.WARNING
    tell(f"{first}; finish with: {command_line(ctx, *finish(report))}", level=level)


def print_problems(report: FleetReport) -> None:
    """One ``error:`` line on stderr for each tenant that did not end as asked."""
    for item in report.problems:
        tell(f"error: {item.error or item.describe()}")
