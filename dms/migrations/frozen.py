"""Revisions that change the database's rules carry whole texts, frozen when they are generated.

The rules' current truth is the area files of ``dms/schema/sql`` (:mod:`dms.schema.rules`).
A revision that changes rules is generated from them (``dms rules revision``,
:func:`write_revision`) and holds, for every rule it changes, the rule's whole text as it was
and as it is (:class:`RuleChange`; ``None`` for a rule that did not or does not exist). Its
upgrade replaces the one with the other in a tenant's schema, its downgrade the reverse
(:func:`replace_rules`). A revision never reads the area files, another revision's module or
anything else that may change after it was written: what it does is fixed by its own text.

What the rules are at a revision (:func:`frozen_rules`) is read from the revisions up to it:
the first of them, the baseline, holds every rule as the revisions written by hand left them
(``BASELINE``) and changes nothing in the database; every later one applies its ``RULES``.
:func:`pending` compares that with the area files: what a new revision must carry.

Which order: a change drops what goes away or changes (policies, row-security switches,
triggers, then functions removed), then creates what is new or changed (functions, with
``CREATE OR REPLACE`` so that the triggers and policies that use an unchanged signature keep
it, then triggers, switches and policies), each kind in the order of the sources. A function
whose result type changes needs a new name or a drop by hand: PostgreSQL cannot replace it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from dms import citus
from dms.schema import rules
from dms.schema.rules import Rule, RuleKind

#: Drops, in this order: what uses a function before the function.
_DROP_ORDER = (RuleKind.POLICY, RuleKind.ROW_SECURITY, RuleKind.TRIGGER, RuleKind.FUNCTION)
#: Creations, in this order: a function before what uses it.
_CREATE_ORDER = (RuleKind.FUNCTION, RuleKind.TRIGGER, RuleKind.ROW_SECURITY, RuleKind.POLICY)


@dataclass(frozen=True, kw_only=True)
class RuleChange:
    """One rule a revision changes: its identity, and its whole text before and after.

    ``before`` is ``None`` for a rule the revision adds, ``after`` for one it removes.
    """

    identity: str
    before: str | None
    after: str | None

    def reversed(self) -> RuleChange:
        """The same change the other way (a downgrade)."""
        return RuleChange(identity=self.identity, before=self.after, after=self.before)


def replace_rules(
    conn: Connection, schema: str, changes: Sequence[RuleChange], *, reverse: bool = False
) -> None:
    """Apply ``changes`` to ``schema`` in the caller's transaction (``reverse``: undo them)."""
    if reverse:
        changes = [change.reversed() for change in changes]
    before = [_one(change.before) for change in changes if change.before is not None]
    after = [_one(change.after) for change in changes if change.after is not None]
    kept_functions = {rule.identity for rule in after if rule.kind is RuleKind.FUNCTION}
    dropped = [
        rule
        for kind in _DROP_ORDER
        for rule in before
        # A function that stays is replaced in place: its triggers and policies keep it.
        if rule.kind is kind and rule.identity not in kept_functions
    ]
    created = [rule for kind in _CREATE_ORDER for rule in after if rule.kind is kind]
    on_citus = citus.is_citus(conn)
    rules.drop(conn, schema, dropped)
    rules.create(conn, schema, created, on_citus=on_citus)
    if on_citus:
        rules.drop_unused_citus_functions(conn, schema, dropped)


def _one(text: str) -> Rule:
    """The one rule ``text`` holds (a revision's frozen text)."""
    found = rules.parse(f"{text};", area="a revision")
    if len(found) != 1:
        raise rules.RuleSourceError(f"a frozen text holds {len(found)} rules: {text[:80]!r}")
    return found[0]


def frozen_rules(script: ScriptDirectory, head: str | None = None) -> dict[str, str]:
    """Every rule's text as the revisions up to ``head`` (default: the last) leave it."""
    state: dict[str, str] = {}
    for module in _modules(script, head):
        if (baseline := getattr(module, "BASELINE", None)) is not None:
            state = {_one(text).identity: text for text in baseline}
        for change in getattr(module, "RULES", ()):
            if change.after is None:
                state.pop(change.identity, None)
            else:
                state[change.identity] = change.after
    return state


def _modules(script: ScriptDirectory, head: str | None) -> list[ModuleType]:
    """The revisions' modules from the first to ``head``."""
    upper = head or script.get_current_head() or "base"
    return [revision.module for revision in reversed(list(script.walk_revisions("base", upper)))]


def pending(frozen: Mapping[str, str], sources: Iterable[Rule]) -> list[RuleChange]:
    """What a revision must change so that ``frozen`` becomes ``sources``.

    Rules compare by what the database holds of them (their statement and, for a policy, its
    function on Citus): a comment that changes alone changes nothing.
    """
    wanted = {rule.identity: rule for rule in sources}
    changes = [
        RuleChange(identity=identity, before=frozen.get(identity), after=rule.text)
        for identity, rule in wanted.items()
        if identity not in frozen or _definition(_one(frozen[identity])) != _definition(rule)
    ]
    removed = [
        RuleChange(identity=identity, before=text, after=None)
        for identity, text in reversed(list(frozen.items()))
        if identity not in wanted
    ]
    return changes + removed


def _definition(rule: Rule) -> tuple[str, tuple[str, str] | None]:
    return rules.code_of(rule.text), rule.citus_function


def write_revision(script: ScriptDirectory, message: str, changes: Sequence[RuleChange]) -> Path:
    """Write a new revision after the head of ``script`` that makes ``changes``; its path."""
    if not changes:
        raise ValueError("the rule sources are as the revisions leave them: nothing to write")
    head = script.get_current_head()
    number = f"{int(head or 0) + 1:04d}"
    path = Path(script.versions) / f"{number}_{_slug(message)}.py"
    path.write_text(_revision_text(number, head, message, changes), encoding="utf-8")
    return path


def _slug(message: str) -> str:
    """The file name's words: the message's first words, up to about 50 characters."""
    slug = ""
    for word in re.findall(r"[a-z0-9]+", message.lower()):
        if slug and len(slug) + len(word) >= _SLUG_LENGTH:
            break
        slug = f"{slug}_{word}" if slug else word
    return slug or "rules"


_SLUG_LENGTH = 50


def _revision_text(
    number: str, head: str | None, message: str, changes: Sequence[RuleChange]
) -> str:
    entries = "".join(
        "    RuleChange(\n"
        f"        identity={_literal(change.identity)},\n"
        f"        before={_literal(change.before)},\n"
        f"        after={_literal(change.after)},\n"
        "    ),\n"
        for change in changes
    )
    down = "None" if head is None else f'"{head}"'
    return _TEMPLATE.format(
        message=message.strip().rstrip(".") + ".",
        number=number,
        head=head,
        down=down,
        date=datetime.date.today().isoformat(),
        entries=entries,
        listing="".join(f"* {change.identity}\n" for change in changes),
    )


def _literal(text: str | None) -> str:
    """``text`` as a Python literal a reader can read: a raw triple-quoted string if it can be."""
    if text is None:
        return "None"
    if "\n" not in text and not re.search(r'["\\]', text):
        return f'"{text}"'
    if '"""' in text or text.endswith(("\\", '"')):
        return repr(text)
    return f'r"""{text}"""'


_TEMPLATE = '''\
# ruff: noqa: E501 (the rules' texts are kept as they are written)
"""{message}

Revision ID: {number}
Revises: {head}
Create Date: {date}

Tenant only. Generated by ``dms rules revision`` from the rule sources (dms/schema/sql): each
rule it changes is written whole, as it was and as it is, and the downgrade puts back what was
(docs/rules.md). Not to be edited: change the sources and generate another revision.

{listing}"""

from __future__ import annotations

from alembic import op
from dms.migrations import MigrationScope
from dms.migrations.frozen import RuleChange, replace_rules

revision: str = "{number}"
down_revision: str | None = {down}
branch_labels: str | None = None
depends_on: str | None = None

RULES = (
{entries})


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        replace_rules(op.get_bind(), scope.schema, RULES)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        replace_rules(op.get_bind(), scope.schema, RULES, reverse=True)
'''
