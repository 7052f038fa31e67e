"""A new tenant's schema at head, from SQL recorded once per process instead of Alembic per tenant.

Running the tenant part of every revision through Alembic costs, in Python alone (operations,
reflection of the version table, SQL compilation), several times what the server needs to build the
tables (the figure in bench/README.md). Creating thousands of tenants is therefore done from a
recording: :class:`TenantTemplate` runs the revisions once, exactly as a migration runs them, on a
throwaway schema in a transaction that is rolled back, and keeps every statement they sent with the
throwaway name cut out. :meth:`TenantTemplate.statement` puts a tenant's schema name in, quoted by
the driver, and the whole recording runs as one statement batch (one statement at a time on Citus,
which hands a DDL command's whole query string on to the node that holds the schema, and a node
refuses several commands in one).

Why this is exact: the recording is the SQL the revisions emit against an empty schema on this
server, the only case tenant creation has (the schema is new). Statements that only read the
catalog (Alembic looking for its version table) are left out, and so is a foreign key that a
later revision drops again, with its drop (``_without_undone``); everything else, the version
row included, is kept. The throwaway schema's name has an upper-case letter so that
SQLAlchemy and ``psycopg.sql`` always quote it: every place it appears is ``"<name>"`` (an
identifier) or ``'<name>'`` (a value), and nothing of it may be left over
(:class:`TemplateError` otherwise). The tests compare a tenant made from the recording with one
migrated revision by revision, catalog entry by catalog entry.

A recording is kept per process, keyed by what changes the SQL: the scripts and their head, the
``users`` schema, the server's version and whether it is a Citus cluster (revisions emit
different SQL there, and a Citus coordinator reports the version of its PostgreSQL).
"""

from __future__ import annotations

import enum
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection, ExecutionContext

from dms import citus
from dms.config import Settings
from dms.errors import MigrationError
from dms.migrations.schema_step import migrate_schema
from dms.migrations.scope import MigrationScope
from dms.migrations.scripts import VERSION_TABLE, Scripts

#: Statements that only read the catalog or the version table: Alembic looking around.
_READ_ONLY = re.compile(
    rf"^\s*SELECT\b.*\b(pg_catalog|information_schema|{VERSION_TABLE})\b", re.IGNORECASE | re.DOTALL
)

#: ``ALTER TABLE <table> ADD CONSTRAINT <name> FOREIGN KEY ...``, as Alembic writes it.
_ADDS_FOREIGN_KEY = re.compile(r"^\s*ALTER TABLE (\S+) ADD CONSTRAINT (\S+) FOREIGN KEY\b")
#: ``ALTER TABLE <table> DROP CONSTRAINT <name>``, as Alembic writes it.
_DROPS_CONSTRAINT = re.compile(r"^\s*ALTER TABLE (\S+) DROP CONSTRAINT (\S+)\s*$")


class TemplateError(MigrationError):
    """The tenant revisions emitted SQL that cannot be replayed for another schema."""


@dataclass(frozen=True)
class _Key:
    scripts: Scripts
    head: str | None
    users_schema: str
    server_version: int
    citus: bool


class _Slot(enum.Enum):
    """Where the schema name goes in a recording."""

    IDENTIFIER = "identifier"
    VALUE = "value"


@dataclass(frozen=True)
class TenantTemplate:
    """The SQL that takes a new, empty tenant schema to head, with the schema name left open."""

    head: str | None
    #: Each recorded statement in pieces: SQL text, and slots where the schema name goes.
    recorded: tuple[tuple[str | _Slot, ...], ...]

    def statements(self, schema: str) -> list[sql.Composed]:
        """Each recorded statement for ``schema``, quoted by the driver."""
        return [sql.Composed([_filled(piece, schema) for piece in one]) for one in self.recorded]

    def batch(self, schema: str) -> sql.Composed:
        """The whole recording for ``schema`` as one batch: one round trip."""
        return sql.SQL(";\n").join(self.statements(schema)) + sql.SQL(";")


def _filled(piece: str | _Slot, schema: str) -> sql.Composable:
    if piece is _Slot.IDENTIFIER:
        return sql.Identifier(schema)
    if piece is _Slot.VALUE:
        return sql.Literal(schema)
    return sql.SQL(piece)  # recorded text, never user input


_templates: dict[_Key, TenantTemplate] = {}
_templates_lock = threading.Lock()


def tenant_template(conn: Connection, scripts: Scripts, settings: Settings) -> TenantTemplate:
    """The recording for ``scripts`` at head on ``conn``'s server, made on first use per process.

    The first use records on ``conn`` inside a savepoint that is rolled back, so the caller's
    transaction is left as it was.
    """
    key = _Key(
        scripts=scripts,
        head=scripts.head(),
        users_schema=settings.users_schema,
        server_version=_driver(conn).info.server_version,
        citus=citus.is_citus(conn),
    )
    with _templates_lock:
        template = _templates.get(key)
        if template is None:
            template = _record(conn, scripts, settings, key.head)
            _templates[key] = template
    return template


def _record(
    conn: Connection, scripts: Scripts, settings: Settings, head: str | None
) -> TenantTemplate:
    # Upper case: always quoted, so every occurrence can be found and none is a prefix of another
    # identifier (see the module docstring).
    throwaway = f"dms_Template_{secrets.token_hex(8)}"
    savepoint = conn.begin_nested()
    try:
        conn.execute(sa.schema.CreateSchema(throwaway))
        with _statements_sent(conn) as sent:
            scope = MigrationScope.tenant(throwaway, settings)
            migrate_schema(conn, scope, head, "upgrade", scripts)
    finally:
        savepoint.rollback()
    kept = _without_undone([text for text in sent if not _READ_ONLY.match(text)])
    ordered = _users_keys_last(kept, settings.users_schema)
    return TenantTemplate(head=head, recorded=tuple(_cut(text, throwaway) for text in ordered))


def _users_keys_last(statements: list[str], users_schema: str) -> list[str]:
    """``statements`` with each foreign key to ``users`` moved to the end, before the version row.

    Adding a key to ``users`` locks ``users`` (SHARE ROW EXCLUSIVE) until the tenant's
    transaction commits, which holds off the IAM's writes and every other tenant's creation:
    the less that runs after it, the better. Moving it is exact on a new schema: the tables are
    empty, so the key checks nothing, and no later statement depends on it (a later drop of it
    was taken out by :func:`_without_undone`).
    """
    target = re.compile(
        rf"\bREFERENCES {re.escape(users_schema)}\.users\b|"
        rf"\bREFERENCES \"{re.escape(users_schema)}\"\.users\b"
    )
    keys = [text for text in statements if _ADDS_FOREIGN_KEY.match(text) and target.search(text)]
    rest = [text for text in statements if text not in keys]
    tail = len(rest)
    while tail > 0 and VERSION_TABLE in rest[tail - 1]:
        tail -= 1
    return rest[:tail] + keys + rest[tail:]


def _without_undone(statements: list[str]) -> list[str]:
    """``statements`` less each foreign key that a later statement drops again, both statements.

    A later revision replaces the keys that earlier revisions gave six columns to ``users`` with the
    one key of ``known_users``; a key to ``users`` costs more the more tenants exist
    (docs/operations.md, "Creating and dropping tenants", says why), so a new tenant must not add
    and drop them. Leaving such a pair out is exact on a new schema: the key checks no rows (the
    tables are empty), no statement in between can depend on it (a statement that needed it gone
    would have failed while recording), and its removal leaves nothing in the catalog.
    """
    kept: list[str | None] = list(statements)
    for index, text in enumerate(statements):
        dropped = _DROPS_CONSTRAINT.match(text)
        if dropped is None:
            continue
        for earlier in range(index - 1, -1, -1):
            added = _ADDS_FOREIGN_KEY.match(statements[earlier])
            if kept[earlier] is not None and added and added.groups() == dropped.groups():
                kept[earlier] = kept[index] = None
                break
    return [text for text in kept if text is not None]


@contextmanager
def _statements_sent(conn: Connection) -> Iterator[list[str]]:
    """Every statement ``conn`` sends meanwhile, with its parameters rendered as literals."""
    sent: list[str] = []
    renderer = psycopg.ClientCursor(_driver(conn))

    def record(
        _conn: Connection,
        _cursor: Any,
        statement: str,
        parameters: Any,
        context: ExecutionContext | None,
        executemany: bool,
    ) -> None:
        if context is not None and context.execution_options.get("no_parameters"):
            sent.append(statement)  # sent as it is: '%' is not a placeholder there
            return
        for one in parameters if executemany else [parameters]:
            # Rendered even without parameters: the driver turns '%%' into '%' then too.
            sent.append(renderer.mogrify(statement, one))

    sa.event.listen(conn, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(conn, "before_cursor_execute", record)


def _driver(conn: Connection) -> psycopg.Connection[Any]:
    driver: psycopg.Connection[Any] = conn.connection.driver_connection  # type: ignore[assignment]
    return driver


def _cut(text: str, throwaway: str) -> tuple[str | _Slot, ...]:
    """``text`` in pieces, the throwaway name replaced by slots; nothing of it may remain."""
    pieces: list[str | _Slot] = []
    position = 0
    for found in re.finditer(rf"\"{throwaway}\"|'{throwaway}'", text):
        pieces.append(text[position : found.start()])
        pieces.append(_Slot.IDENTIFIER if found.group().startswith('"') else _Slot.VALUE)
        position = found.end()
    pieces.append(text[position:])
    if any(isinstance(piece, str) and throwaway in piece for piece in pieces):
        raise TemplateError(
            "a tenant revision names its schema inside other text; tenants cannot be created "
            "from a recording of it"
        )
    return tuple(pieces)
