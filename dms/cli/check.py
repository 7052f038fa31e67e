"""``dms check``: every tenant's catalog against what head declares; exit 1 on drift."""

from __future__ import annotations

import argparse
import logging

from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.fleet import progress
from dms.cli.output import add_json_flag, emit_json, tell
from dms.fleet.interrupts import sigterm_as_interrupt
from dms.migrations.drift import DriftReport, check_drift

#: Tenants named in the warning about slow searches (``--json`` lists them all).
_NAMED = 5


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``check`` to ``commands``."""
    check = commands.add_parser(
        "check",
        help="compare every tenant's tables, constraints, indexes, triggers and functions "
        "with head; exit 1 on drift",
        description="Builds a tenant at head in a throw-away schema (in a transaction that is "
        "rolled back) and compares every registered tenant's catalog with it.",
    )
    add_json_flag(check)
    check.set_defaults(run=_check)


def _check(ctx: Context, args: argparse.Namespace) -> int:
    with sigterm_as_interrupt() as signals:
        try:
            report = check_drift(ctx.engine, progress=progress("check"))
        except KeyboardInterrupt:
            tell("interrupted; nothing was changed: run dms check again", level=logging.WARNING)
            return signals.exit_status
    if args.json:
        emit_json(report.as_json())
    else:
        _print(report)
    return EXIT_OK if report.clean else EXIT_ERROR


def _print(report: DriftReport) -> None:
    for drift in report.drifted:
        print(f"tenant {drift.tenant!r}: {drift.problem}")
        for difference in drift.differences:
            print(f"  {difference.describe()}")
            # Function bodies run to pages: --json has them whole.
            if difference.kind != "function":
                for label, text in (("expected", difference.expected), ("found", difference.found)):
                    if text is not None:
                        print(f"    {label}: {text.replace(chr(31), ' | ')}")
    if report.searching_slowly:
        named = ", ".join(repr(t) for t in report.searching_slowly[:_NAMED])
        more = len(report.searching_slowly) - _NAMED
        tell(
            f"{len(report.searching_slowly)} tenant(s) search without their indexes for users: "
            "their search functions belong to a role held to row-level security (migrate as a "
            f"superuser or a role with BYPASSRLS; docs/access.md, Searching): {named}"
            + (f" and {more} more" if more > 0 else ""),
            level=logging.WARNING,
        )
    for problem in report.privileges:
        print(f"privileges: {problem}: run dms roles setup")
    verdict = "no drift" if not report.drifted else f"{len(report.drifted)} drifted"
    if report.privileges:
        verdict += f", {len(report.privileges)} privilege problem(s)"
    print(
        f"checked {report.checked} tenant(s) against head {report.head} "
        f"in {report.seconds:.1f} s: {verdict}"
    )
