"""The database's rules as SQL source: read from ``dms/schema/sql/``, rendered for one tenant.

Every function, trigger, row-level security policy and row-security switch that a tenant schema
holds at head is written once, whole, in one of the area files of ``dms/schema/sql/``
(:data:`AREAS`, in the order they are created), each statement preceded by a comment that says
what rule it enforces. A file is plain SQL that ``psql`` runs as it is (docs/rules.md)::

    psql -v schema=tenant_acme -c 'SET search_path = tenant_acme, pg_temp' -f access.sql

How a file is written:

* Names are unqualified: :func:`create` runs the statements with ``search_path`` set to the
  tenant's schema (transaction-local), so a trigger's table and function and a policy's tables
  resolve to the tenant's own when they are created (their definitions then hold the objects,
  not the names).
* ``:"schema"`` (psql's syntax for a variable quoted as an identifier) stands for the tenant's
  schema where the name itself must be written: a function's pinned ``search_path``, which
  makes its body's names mean the tenant's tables wherever it is called from. Like psql,
  :func:`render` replaces it outside quoted text only.
* ``-- on citus: NAME(ARGUMENTS)`` in a policy's comment: Citus refuses subqueries in the
  policies of distributed tables, so there the policy's condition becomes the SQL function
  ``NAME`` of the row's columns (``ARGUMENTS``, named as the columns), whose body is the same
  condition on one line (whitespace runs outside quoted text made single spaces), and the
  policy calls it (:meth:`Rule.statements`). One source, two renderings; never two texts.

A statement ends at a ``;`` outside quoted text and comments. Each statement is one
:class:`Rule`, known by its :attr:`Rule.identity` (``function access_user()``, ``trigger
documents.audit_row``, ``policy documents.access_visible``, ``row security documents``); a
revision that changes rules carries their whole texts (:mod:`dms.migrations.frozen`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection

from dms.errors import MigrationError
from dms.schema.ddl import execute_ddl

#: The area files, in the order their rules are created: a SQL function's body is checked when
#: it is created, so what it calls comes first (access before search, which reads the rules).
AREAS = ("users", "documents", "folders", "access", "audit", "search")

#: psql's variable syntax for the tenant's schema, quoted as an identifier.
SCHEMA = ':"schema"'

_CITUS = re.compile(r"^--\s*on citus:\s*(\w+)\s*\(([^)]*)\)\s*$", re.MULTILINE)
_FUNCTION = re.compile(r"CREATE\s+OR\s+REPLACE\s+FUNCTION\s+(\w+)\s*\(", re.IGNORECASE)
_TRIGGER = re.compile(
    r"CREATE\s+TRIGGER\s+(\w+)\s.*?\sON\s+(\w+)\s+(?:REFERENCING|FOR)\b", re.IGNORECASE | re.DOTALL
)
_POLICY = re.compile(r"CREATE\s+POLICY\s+(\w+)\s+ON\s+(\w+)\s+USING\s*\(", re.IGNORECASE)
_ROW_SECURITY = re.compile(
    r"ALTER\s+TABLE\s+(\w+)\s+ENABLE\s+ROW\s+LEVEL\s+SECURITY,\s*FORCE\s+ROW\s+LEVEL\s+SECURITY$",
    re.IGNORECASE,
)


class RuleSourceError(MigrationError):
    """An area file (or a revision's frozen text) holds what cannot be read as rules.

    A developer's mistake in ``dms/schema/sql/`` (found by the tests), never a user's input.
    """


class RuleKind(enum.Enum):
    """What a rule is; the order of creation within a change (functions before their users)."""

    FUNCTION = "function"
    TRIGGER = "trigger"
    POLICY = "policy"
    ROW_SECURITY = "row security"


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One statement of an area file: a function, a trigger, a policy or a row-security switch.

    ``text`` is the statement as written, its comment included, without the final ``;``.
    """

    kind: RuleKind
    name: str
    table: str | None
    arguments: str
    text: str
    area: str

    @property
    def identity(self) -> str:
        """What the rule is, whatever its definition: the key revisions freeze it under."""
        if self.kind is RuleKind.FUNCTION:
            return f"function {self.name}({self.arguments})"
        if self.kind is RuleKind.ROW_SECURITY:
            return f"row security {self.table}"
        return f"{self.kind.value} {self.table}.{self.name}"

    @property
    def citus_function(self) -> tuple[str, str] | None:
        """A policy's function on Citus: (name, arguments), if its comment names one."""
        found = _CITUS.search(self.text)
        return (found.group(1), found.group(2).strip()) if found else None

    def statements(self, schema: str, *, on_citus: bool) -> list[sql.Composable]:
        """The SQL that creates this rule in ``schema`` (see :func:`render`)."""
        function = self.citus_function if on_citus else None
        if function is None:
            return [render(self.text, schema)]
        name, arguments = function
        condition = render(_one_line(_policy_condition(self.text)), schema).as_string()
        columns = ", ".join(argument.split()[0] for argument in arguments.split(","))
        head = _POLICY.match(code_of(self.text))
        assert head is not None  # noqa: S101 (a Citus function is named by a policy only)
        return [
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {}({}) RETURNS boolean LANGUAGE sql STABLE"
                " SET search_path = {}, pg_temp AS {}"
            ).format(
                sql.Identifier(name),
                sql.SQL(arguments),
                sql.Identifier(schema),
                sql.Literal(f"SELECT {condition}"),
            ),
            sql.SQL("{}{}({}))").format(
                render(head.group(0), schema), sql.Identifier(name), sql.SQL(columns)
            ),
        ]

    def drop(self) -> sql.Composed:
        """The statement that removes this rule (a policy's Citus function stays: shared)."""
        name, table = sql.Identifier(self.name), sql.Identifier(self.table or "")
        if self.kind is RuleKind.FUNCTION:
            return sql.SQL("DROP FUNCTION {}({})").format(name, sql.SQL(self.arguments))
        if self.kind is RuleKind.TRIGGER:
            return sql.SQL("DROP TRIGGER {} ON {}").format(name, table)
        if self.kind is RuleKind.POLICY:
            return sql.SQL("DROP POLICY {} ON {}").format(name, table)
        return sql.SQL(
            "ALTER TABLE {} NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY"
        ).format(table)


@cache
def load() -> tuple[Rule, ...]:
    """Every rule of the area files, in the order they are created."""
    rules = tuple(rule for area in AREAS for rule in parse(_area_text(area), area=area))
    validate(rules)
    return rules


def _area_text(area: str) -> str:
    return (resources.files("dms.schema") / "sql" / f"{area}.sql").read_text("utf-8")


def parse(text: str, *, area: str) -> list[Rule]:
    """The rules of one area file's ``text``."""
    return [_rule(statement, area) for statement in split(text)]


def validate(rules: Sequence[Rule]) -> None:
    """Refuse rules that cannot all be created (:class:`RuleSourceError`).

    A rule written twice; policies that name one function on Citus for two conditions.
    """
    _require_unique(rules)
    _require_one_condition_per_function(rules)


def _require_unique(rules: Iterable[Rule]) -> None:
    seen: set[str] = set()
    for rule in rules:
        if rule.identity in seen:
            raise RuleSourceError(f"{rule.identity} is written twice ({rule.area}.sql)")
        seen.add(rule.identity)


def _require_one_condition_per_function(rules: Iterable[Rule]) -> None:
    """Policies that share a function on Citus share its body: their conditions must agree."""
    conditions: dict[str, str] = {}
    for rule in rules:
        if (function := rule.citus_function) is None:
            continue
        condition = _one_line(_policy_condition(rule.text))
        if conditions.setdefault(function[0], condition) != condition:
            raise RuleSourceError(
                f"{rule.identity} names {function[0]} on Citus with another condition than"
                " the policies before it: name another function"
            )


def _rule(statement: str, area: str) -> Rule:
    code = code_of(statement)
    if found := _FUNCTION.match(code):
        arguments = _balanced(code, found.end() - 1)
        return Rule(
            kind=RuleKind.FUNCTION,
            name=found.group(1),
            table=None,
            arguments=" ".join(arguments.split()),
            text=statement,
            area=area,
        )
    for kind, pattern in (
        (RuleKind.TRIGGER, _TRIGGER),
        (RuleKind.POLICY, _POLICY),
    ):
        if found := pattern.match(code):
            return Rule(
                kind=kind,
                name=found.group(1),
                table=found.group(2),
                arguments="",
                text=statement,
                area=area,
            )
    if found := _ROW_SECURITY.match(code):
        return Rule(
            kind=RuleKind.ROW_SECURITY,
            name=found.group(1),
            table=found.group(1),
            arguments="",
            text=statement,
            area=area,
        )
    raise RuleSourceError(f"not a rule ({area}.sql): {code[:80]!r}")


def code_of(statement: str) -> str:
    """The statement without the comment lines above it: what the database holds of it."""
    lines = statement.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines).strip()


def _balanced(text: str, opening: int) -> str:
    """The text between the parenthesis at ``opening`` and the one that closes it."""
    depth = 0
    for kind, chunk, start in _chunks(text[opening:]):
        if kind != "code":
            continue
        for offset, char in enumerate(chunk):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                return text[opening + 1 : opening + start + offset]
    raise RuleSourceError(f"unbalanced parentheses: {text[opening : opening + 80]!r}")


def _policy_condition(text: str) -> str:
    code = code_of(text)
    found = _POLICY.match(code)
    if found is None:
        raise RuleSourceError(f"only a policy names a function on Citus: {code[:80]!r}")
    return _balanced(code, found.end() - 1).strip()


def _one_line(condition: str) -> str:
    """``condition`` on one line.

    Outside quoted text, each whitespace run (or comment) becomes one space, and none is kept
    just inside a parenthesis.
    """
    return "".join(
        chunk if kind in ("quoted", "variable") else _squashed(" " if kind == "comment" else chunk)
        for kind, chunk, _start in _chunks(condition)
    ).strip()


def _squashed(code: str) -> str:
    """One space for each whitespace run, none at a parenthesis' inner edge.

    ``( SELECT`` would read ``(SELECT`` had it been written on one line.
    """
    words = " ".join(code.split())
    before = " " if code[:1].isspace() else ""
    after = " " if code[-1:].isspace() and words else ""
    return _INSIDE_PARENTHESES.sub(r"\1", before + words + after)


_INSIDE_PARENTHESES = re.compile(r"(\() +| +(?=\))")


def split(text: str) -> list[str]:
    """The statements of an area file, each with the comment lines just above it.

    A statement ends at a ``;`` outside quoted text and comments. Comments separated from the
    next statement by a blank line are about the file (its header, a section), not kept.
    """
    statements: list[str] = []
    current = ""
    for kind, chunk, _start in _chunks(text):
        pieces = chunk.split(";") if kind == "code" else [chunk]
        current += pieces[0]
        for piece in pieces[1:]:
            statements.append(_attached(current))
            current = piece
    if code_of(current):
        raise RuleSourceError(f"statement without ';': {code_of(current)[:80]!r}")
    return [statement for statement in statements if code_of(statement)]


def _attached(statement: str) -> str:
    """The statement with only the comment lines that touch it (no blank line between)."""
    lines = statement.strip("\n").splitlines()
    first = len(lines) - len(code_of("\n".join(lines)).splitlines())
    start = first
    while start > 0 and lines[start - 1].strip():
        start -= 1
    return "\n".join(lines[start:]).strip()


_TOKEN = re.compile(
    r"--[^\n]*|'(?:[^']|'')*'|:?\"(?:[^\"]|\"\")*\"|\$(?:[A-Za-z_]\w*)?\$", re.DOTALL
)


_KINDS = {"-": "comment", ":": "variable"}


def _chunks(text: str) -> Iterator[tuple[str, str, int]]:
    """``text`` as (kind, chunk, start), in order.

    Kinds: ``code``, ``comment``, ``variable`` (psql's ``:"name"``) or ``quoted`` (strings,
    quoted identifiers, dollar-quoted bodies).
    """
    position = 0
    while position < len(text):
        found = _TOKEN.search(text, position)
        if found is None:
            yield "code", text[position:], position
            return
        if found.start() > position:
            yield "code", text[position : found.start()], position
        token = found.group(0)
        if token.startswith("$"):
            end = text.find(token, found.end())
            if end < 0:
                raise RuleSourceError(f"unterminated {token} quote")
            yield "quoted", text[found.start() : end + len(token)], found.start()
            position = end + len(token)
            continue
        yield _KINDS.get(token[0], "quoted"), token, found.start()
        position = found.end()


def render(text: str, schema: str) -> sql.Composed:
    """``text`` with each ``:"schema"`` outside quoted text made ``schema``, quoted."""
    return sql.Composed(
        [
            sql.Identifier(schema) if kind == "variable" and chunk == SCHEMA else sql.SQL(chunk)
            for kind, chunk, _start in _chunks(text)
        ]
    )


def create(conn: Connection, schema: str, rules: Iterable[Rule], *, on_citus: bool) -> None:
    """Create ``rules`` in ``schema``, in the order given, in the caller's transaction.

    Their names resolve in ``schema`` (then ``pg_temp``) while they are created; the search
    path is the server's default again afterwards (transaction-local either way: nothing is
    left on a pooled connection).
    """
    with _names_in(conn, schema):
        for rule in rules:
            for statement in rule.statements(schema, on_citus=on_citus):
                execute_ddl(conn, statement)


@contextmanager
def _names_in(conn: Connection, schema: str) -> Iterator[None]:
    """Resolve names in ``schema`` (then ``pg_temp``) for the block, transaction-local."""
    execute_ddl(conn, sql.SQL("SET LOCAL search_path = {}, pg_temp").format(sql.Identifier(schema)))
    try:
        yield
    finally:
        execute_ddl(conn, sql.SQL("SET LOCAL search_path = DEFAULT"))


def drop_unused_citus_functions(conn: Connection, schema: str, dropped: Iterable[Rule]) -> None:
    """Drop the Citus functions of the ``dropped`` policies that no policy calls any more.

    Several policies may call one function (:meth:`Rule.citus_function`): it goes with the
    last of them, so that a change and its undoing leave the catalog exactly as it was.
    """
    functions = {rule.citus_function for rule in dropped if rule.citus_function is not None}
    for name, arguments in sorted(functions):
        types = ", ".join(argument.split(maxsplit=1)[1] for argument in arguments.split(","))
        signature = sql.SQL("{}.{}({})").format(
            sql.Identifier(schema), sql.Identifier(name), sql.SQL(types)
        )
        function = sa.func.to_regprocedure(signature.as_string(conn.connection.driver_connection))
        called = sa.exists().where(
            _depend.c.refobjid == function, _depend.c.classid == sa.func.to_regclass("pg_policy")
        )
        if not conn.execute(sa.select(called)).scalar_one():
            execute_ddl(conn, sql.SQL("DROP FUNCTION {}").format(signature))


_depend = sa.table("pg_depend", sa.column("classid"), sa.column("refobjid"))


def drop(conn: Connection, schema: str, rules: Iterable[Rule]) -> None:
    """Remove ``rules`` from ``schema``, in the order given (see :func:`create`)."""
    with _names_in(conn, schema):
        for rule in rules:
            execute_ddl(conn, rule.drop())
