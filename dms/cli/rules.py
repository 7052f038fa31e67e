"""``dms rules diff`` and ``dms rules revision``: the rule sources against the revisions.

For whoever changes a rule of the database (docs/rules.md): edit the area file in
``dms/schema/sql``, see what differs from what the revisions leave (``diff``), then write the
revision that carries the whole texts (``revision -m MESSAGE``). Neither needs a database.
"""

from __future__ import annotations

import argparse

from alembic.script import ScriptDirectory

from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.output import tell
from dms.migrations import alembic_config
from dms.migrations.frozen import RuleChange, frozen_rules, pending, write_revision
from dms.schema import rules


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rules`` and its subcommands to ``commands``."""
    group = commands.add_parser(
        "rules",
        help="the database's rules (dms/schema/sql) against the revisions: diff, revision",
    )
    actions = group.add_subparsers(dest="rules_command", required=True)
    diff = actions.add_parser(
        "diff", help="the rules whose source differs from head; exit 1 if there are any"
    )
    diff.set_defaults(run=_diff)
    revision = actions.add_parser(
        "revision", help="write the revision that brings head to the rule sources"
    )
    revision.add_argument(
        "-m", "--message", required=True, help="what the change does, as the revision's title"
    )
    revision.set_defaults(run=_revision)


def _changes() -> tuple[ScriptDirectory, list[RuleChange]]:
    script = ScriptDirectory.from_config(alembic_config())
    return script, pending(frozen_rules(script), rules.load())


def _diff(_ctx: Context, _args: argparse.Namespace) -> int:
    script, changes = _changes()
    for change in changes:
        print(f"{_sign(change)} {change.identity}")
    if changes:
        return EXIT_ERROR
    print(f"the rule sources are what revision {script.get_current_head()} leaves")
    return EXIT_OK


def _sign(change: RuleChange) -> str:
    if change.before is None:
        return "+"
    return "-" if change.after is None else "~"


def _revision(_ctx: Context, args: argparse.Namespace) -> int:
    script, changes = _changes()
    if not changes:
        tell(f"error: the rule sources are what revision {script.get_current_head()} leaves")
        return EXIT_ERROR
    path = write_revision(script, args.message, changes)
    print(f"wrote {path} ({len(changes)} rule(s))")
    return EXIT_OK
