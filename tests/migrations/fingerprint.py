"""What the migration tests compare and observe: catalog fingerprints, a DDL audit, the CLI.

:func:`fingerprint` reads one schema from the PostgreSQL catalog into a :class:`Fingerprint`:
tables, columns (type, default, nullability, in order), constraints, indexes, triggers and
functions, each rendered by the server itself (``format_type``, ``pg_get_expr``,
``pg_get_constraintdef``, ``pg_get_indexdef``, ``pg_get_triggerdef``, ``pg_get_functiondef``).
The schema's own name is replaced by ``<schema>`` in every rendered definition, so that two
tenant schemas, or a migrated and a declared one, compare equal when they have the same shape.
A schema that does not exist has the empty fingerprint. Alembic's ``alembic_version`` table is
left out (revisions are asserted separately, with :func:`revisions`).

:class:`DdlAudit` installs an event trigger that records every object created, altered or
dropped in the database, by any connection; :func:`run_alembic` runs the ``alembic`` command
line on a database in a subprocess.

SQL here is literal text on purpose: these are test probes of the catalog, not runtime code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from dms import migrations, provisioning, tenancy
from dms.migrations import read_versions
from dms.schema import tenant as t
from dms.testing.factories import (
    DocumentFactory,
    DocumentTagFactory,
    FolderFactory,
    MetadataFieldFactory,
    MetadataOptionFactory,
    MetadataValueFactory,
    RevisionFactory,
    TagFactory,
)
from dms.users import create_user

#: The tenants of the ``fleet`` fixture (tests/migrations/conftest.py).
TENANTS = ("alpha", "bravo")

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION_TABLE = "alembic_version"
PLACEHOLDER = "<schema>"

Row = tuple[str | bool | None, ...]


@dataclass(frozen=True)
class Fingerprint:
    """The shape of one schema; hashable, printable, and equal for equal shapes."""

    tables: tuple[Row, ...]
    columns: tuple[Row, ...]
    constraints: tuple[Row, ...]
    indexes: tuple[Row, ...]
    triggers: tuple[Row, ...]
    functions: tuple[Row, ...]
    policies: tuple[Row, ...]

    def structure(self) -> Fingerprint:
        """Only what table definitions can declare: no triggers, no functions."""
        return Fingerprint(
            tables=self.tables,
            columns=self.columns,
            constraints=self.constraints,
            indexes=self.indexes,
            triggers=(),
            functions=(),
            policies=(),
        )

    @property
    def is_empty(self) -> bool:
        """Whether the schema holds nothing (or does not exist)."""
        return not any(
            (
                self.tables,
                self.columns,
                self.constraints,
                self.indexes,
                self.triggers,
                self.functions,
                self.policies,
            )
        )


_TABLES = sa.text(
    """
    SELECT c.relname, c.relkind::text, c.relpersistence::text,
           (SELECT string_agg(o, ',' ORDER BY o) FROM unnest(c.reloptions) AS o)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = :schema AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       AND c.relname <> :version_table
     ORDER BY 1
    """
)

# Columns in their physical order (attnum), which a downgrade must restore too.
_COLUMNS = sa.text(
    """
    SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
           pg_get_expr(d.adbin, d.adrelid), a.attnotnull, a.attidentity::text,
           a.attgenerated::text
      FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE n.nspname = :schema AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
       AND c.relname <> :version_table AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY c.relname, a.attnum
    """
)

_CONSTRAINTS = sa.text(
    """
    SELECT c.relname, k.conname, k.contype::text, pg_get_constraintdef(k.oid),
           k.condeferrable, k.condeferred, k.convalidated
      FROM pg_constraint k
      JOIN pg_class c ON c.oid = k.conrelid
      JOIN pg_namespace n ON n.oid = k.connamespace
     WHERE n.nspname = :schema AND c.relname <> :version_table
     ORDER BY 1, 2
    """
)

_INDEXES = sa.text(
    """
    SELECT t.relname, i.relname, pg_get_indexdef(x.indexrelid)
      FROM pg_index x
      JOIN pg_class i ON i.oid = x.indexrelid
      JOIN pg_class t ON t.oid = x.indrelid
      JOIN pg_namespace n ON n.oid = i.relnamespace
     WHERE n.nspname = :schema AND t.relname <> :version_table
     ORDER BY 1, 2
    """
)

# Internal triggers implement foreign keys and are named after OIDs: the constraints cover them.
_TRIGGERS = sa.text(
    """
    SELECT c.relname, g.tgname, pg_get_triggerdef(g.oid), g.tgenabled::text
      FROM pg_trigger g
      JOIN pg_class c ON c.oid = g.tgrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = :schema AND NOT g.tgisinternal
     ORDER BY 1, 2
    """
)

_FUNCTIONS = sa.text(
    """
    SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = :schema AND p.prokind IN ('f', 'p')
     ORDER BY 1, 2
    """
)


# Row-level security: each table's switches (enabled, forced) where one is on, and its policies.
_POLICIES = sa.text(
    """
    SELECT c.relname, '', c.relrowsecurity::text, c.relforcerowsecurity::text, '', '', ''
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = :schema AND (c.relrowsecurity OR c.relforcerowsecurity)
    UNION ALL
    SELECT c.relname, p.polname, p.polcmd::text, p.polpermissive::text, p.polroles::text,
           pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid)
      FROM pg_policy p
      JOIN pg_class c ON c.oid = p.polrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = :schema
     ORDER BY 1, 2
    """
)


def _normaliser(schema: str) -> re.Pattern[str]:
    # The name as a whole identifier, bare or double-quoted (never inside a longer name).
    escaped = re.escape(schema)
    return re.compile(rf'(?<![\w$"]){escaped}(?![\w$"])|"{escaped}"')


def _rows(conn: Connection, query: sa.TextClause, schema: str) -> tuple[Row, ...]:
    pattern = _normaliser(schema)
    result = conn.execute(query, {"schema": schema, "version_table": VERSION_TABLE})
    return tuple(
        tuple(pattern.sub(PLACEHOLDER, value) if isinstance(value, str) else value for value in row)
        for row in result
    )


def fingerprint(conn_or_engine: Connection | Engine, schema: str) -> Fingerprint:
    """The fingerprint of ``schema`` (empty if it does not exist), with its name normalised."""
    if isinstance(conn_or_engine, Engine):
        with conn_or_engine.connect() as conn:
            return fingerprint(conn, schema)
    conn = conn_or_engine
    return Fingerprint(
        tables=_rows(conn, _TABLES, schema),
        columns=_rows(conn, _COLUMNS, schema),
        constraints=_rows(conn, _CONSTRAINTS, schema),
        indexes=_rows(conn, _INDEXES, schema),
        triggers=_rows(conn, _TRIGGERS, schema),
        functions=_rows(conn, _FUNCTIONS, schema),
        policies=_rows(conn, _POLICIES, schema),
    )


def revisions(engine: Engine, *schemas: str) -> dict[str, str | None]:
    """The Alembic revision of each schema (``None``: base, or no version table)."""
    with engine.connect() as conn:
        return read_versions(conn, schemas)


def registry_revisions(engine: Engine) -> dict[str, str | None] | None:
    """The registry's copy of each tenant's revision, by schema (``None``: no such column)."""
    with engine.connect() as conn:
        has_column = conn.scalar(
            sa.text(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'dms' "
                "AND table_name = 'tenants' AND column_name = 'revision'"
            )
        )
        if not has_column:
            return None
        rows = conn.execute(sa.text("SELECT schema_name, revision FROM dms.tenants"))
        return {str(schema): revision for schema, revision in rows}


def assert_registry_matches(engine: Engine) -> None:
    """Where the registry records revisions, it says what every tenant's version table says."""
    recorded = registry_revisions(engine)
    if recorded is not None:
        assert recorded == revisions(engine, *recorded)


def schema_exists(engine: Engine, schema: str) -> bool:
    """Whether ``schema`` is in the catalog."""
    with engine.connect() as conn:
        found = conn.scalar(
            sa.text("SELECT count(*) FROM pg_namespace WHERE nspname = :schema"),
            {"schema": schema},
        )
    return bool(found == 1)


# --- DDL audit ----------------------------------------------------------------------------

_AUDIT_SCHEMA = "ddl_audit"
_INSTALL_AUDIT = (
    f"CREATE SCHEMA {_AUDIT_SCHEMA}",
    f"""CREATE TABLE {_AUDIT_SCHEMA}.log (
            id bigserial PRIMARY KEY, command_tag text NOT NULL, object_type text,
            object_identity text)""",
    f"""CREATE FUNCTION {_AUDIT_SCHEMA}.log_commands() RETURNS event_trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {_AUDIT_SCHEMA}.log (command_tag, object_type, object_identity)
            SELECT command_tag, object_type, object_identity
              FROM pg_event_trigger_ddl_commands();
        END $$""",
    f"""CREATE FUNCTION {_AUDIT_SCHEMA}.log_drops() RETURNS event_trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {_AUDIT_SCHEMA}.log (command_tag, object_type, object_identity)
            SELECT tg_tag, object_type, object_identity FROM pg_event_trigger_dropped_objects();
        END $$""",
    f"""CREATE EVENT TRIGGER ddl_audit_commands ON ddl_command_end
        EXECUTE FUNCTION {_AUDIT_SCHEMA}.log_commands()""",
    f"""CREATE EVENT TRIGGER ddl_audit_drops ON sql_drop
        EXECUTE FUNCTION {_AUDIT_SCHEMA}.log_drops()""",
)


@dataclass(frozen=True)
class DdlCommand:
    """One object that a committed DDL statement created, altered or dropped."""

    command_tag: str
    object_type: str | None
    object_identity: str | None


class DdlAudit:
    """Records, server-side, every object created, altered or dropped in one database.

    An event trigger sees every connection (subprocesses included), and only what actually
    changed: ``CREATE ... IF NOT EXISTS`` on an existing object records nothing. Rows of a
    rolled-back transaction roll back with it.
    """

    def __init__(self, engine: Engine) -> None:
        """Install the event triggers in ``engine``'s database (needs a superuser)."""
        self._engine = engine
        with engine.begin() as conn:
            for statement in _INSTALL_AUDIT:
                conn.execute(sa.text(statement))

    def commands(self) -> list[DdlCommand]:
        """Everything recorded since the audit started or was last cleared, in order."""
        query = sa.text(
            f"SELECT command_tag, object_type, object_identity FROM {_AUDIT_SCHEMA}.log ORDER BY id"
        )
        with self._engine.connect() as conn:
            return [DdlCommand(*row) for row in conn.execute(query)]

    def clear(self) -> None:
        """Forget what was recorded so far."""
        with self._engine.begin() as conn:
            conn.execute(sa.text(f"TRUNCATE {_AUDIT_SCHEMA}.log"))


# --- the alembic command line -------------------------------------------------------------


def run_alembic(
    url: URL, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``alembic -c alembic.ini <args>`` on the database ``url`` in this interpreter's env."""
    return subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(REPO_ROOT / "alembic.ini"), *args],
        cwd=REPO_ROOT,
        env=alembic_env(url, extra_env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def alembic_env(url: URL, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an ``alembic`` subprocess that migrates the database ``url``."""
    return {
        **os.environ,
        "DMS_DATABASE_URL": url.render_as_string(hide_password=False),
        **(extra_env or {}),
    }


# --- data ---------------------------------------------------------------------------------


def build_fleet(engine: Engine) -> None:
    """Migrate to head and create the tenants of :data:`TENANTS`, each holding data."""
    migrations.upgrade(engine)
    for slug in TENANTS:
        provisioning.create_tenant(engine, slug)
        populate_tenant(engine, slug)


def populate_tenant(engine: Engine, slug: str) -> None:
    """Fill every table of tenant ``slug`` with a few valid rows (factories of dms.testing)."""
    with engine.begin() as conn:
        user = create_user(conn, email=f"{uuid.uuid4().hex}@example.org", display_name="Owner")
        routed = tenancy.route(conn, slug)
        top = FolderFactory(conn=routed, created_by=user)
        inner = FolderFactory(conn=routed, created_by=user, parent_id=top["id"])
        doc = DocumentFactory(conn=routed, created_by=user, folder_id=inner["id"])
        RevisionFactory(conn=routed, document_id=doc["id"], uploaded_by=user)
        latest = RevisionFactory(conn=routed, document_id=doc["id"], uploaded_by=user)
        routed.execute(
            sa.update(t.documents)
            .where(t.documents.c.id == doc["id"])
            .values(current_revision_id=latest["id"])
        )
        tag = TagFactory(conn=routed, created_by=user)
        DocumentTagFactory(conn=routed, document_id=doc["id"], tag_id=tag["id"])
        text_field = MetadataFieldFactory(conn=routed, created_by=user)
        MetadataValueFactory(
            conn=routed,
            document_id=doc["id"],
            field_id=text_field["id"],
            field_type="string",
            value_string="kept",
        )
        multi = MetadataFieldFactory(conn=routed, created_by=user, field_type="multi_select")
        option = MetadataOptionFactory(conn=routed, field_id=multi["id"], field_type="multi_select")
        MetadataValueFactory(
            conn=routed, document_id=doc["id"], field_id=multi["id"], field_type="multi_select"
        )
        routed.execute(
            sa.insert(t.document_metadata_choices).values(
                document_id=doc["id"], field_id=multi["id"], option_id=option["id"]
            )
        )


def schema_rows(engine: Engine, schema: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of ``schema`` (but ``alembic_version``), in a stable order.

    Tables come from the catalog, not from the declarations, so this reads a schema at any
    revision.
    """
    with engine.connect() as conn:
        names = [str(row[0]) for row in _rows(conn, _TABLES, schema) if row[1] in ("r", "p")]
        return {
            name: sorted(
                (
                    tuple(row)
                    for row in conn.execute(
                        sa.select(sa.text("*")).select_from(sa.table(name, schema=schema))
                    )
                ),
                key=repr,
            )
            for name in names
        }
