"""What a tenant schema holds, read from the PostgreSQL catalog in a comparable form.

Seven aspects of a schema: its tables (with their row-level security switches), columns (type,
default, nullability, identity, generation, in their order), constraints, indexes, triggers,
functions and row-level security policies. Each object is one
:class:`CatalogRow`: a kind, a name (``documents.ix_documents_folder_id``) and its definition
as the server renders it (``format_type``, ``pg_get_expr``, ``pg_get_constraintdef``,
``pg_get_indexdef``, ``pg_get_triggerdef``, ``pg_get_functiondef``, ``pg_get_expr`` of a
policy), with the schema's own
name replaced by ``<schema>``, so that two tenants of the same shape read the same.

For thousands of tenants, :func:`fingerprints` asks the server for one digest per schema and
aspect (an ``md5`` over the sorted rows), :data:`SCHEMAS_PER_QUERY` schemas per query; only
the tenants whose digests differ from the reference are read row by row (:func:`rows`).
Internal triggers (those of foreign keys) and the version table are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import REGCLASS, aggregate_order_by
from sqlalchemy.engine import Connection, Engine

from dms.fleet.progress import NoProgress, Progress
from dms.migrations.scripts import VERSION_TABLE
from dms.migrations.status import READ_CONNECTIONS

#: Schemas read by one digest query.
SCHEMAS_PER_QUERY = 250

PLACEHOLDER = "<schema>"
_ROW_SEPARATOR = "\x1e"
_FIELD_SEPARATOR = "\x1f"

#: The system catalogs that dms reads (here, in :mod:`dms.roles` and in the tests' probes),
#: declared once with the columns any of them reads.
PG_NAMESPACE = sa.table(
    "pg_namespace", sa.column("oid"), sa.column("nspname"), sa.column("nspowner")
)
PG_CLASS = sa.table(
    "pg_class",
    sa.column("oid"),
    sa.column("relname"),
    sa.column("relnamespace"),
    sa.column("relkind"),
    sa.column("relowner"),
    sa.column("relpersistence"),
    sa.column("reloptions"),
    sa.column("relrowsecurity"),
    sa.column("relforcerowsecurity"),
)
_attribute = sa.table(
    "pg_attribute",
    sa.column("attrelid"),
    sa.column("attnum"),
    sa.column("attname"),
    sa.column("atttypid"),
    sa.column("atttypmod"),
    sa.column("attnotnull"),
    sa.column("attidentity"),
    sa.column("attgenerated"),
    sa.column("attisdropped"),
)
_attrdef = sa.table("pg_attrdef", sa.column("adrelid"), sa.column("adnum"), sa.column("adbin"))
_constraint = sa.table(
    "pg_constraint",
    sa.column("oid"),
    sa.column("conname"),
    sa.column("contype"),
    sa.column("conrelid"),
    sa.column("connamespace"),
    sa.column("condeferrable"),
    sa.column("condeferred"),
    sa.column("convalidated"),
)
_depend = sa.table(
    "pg_depend",
    sa.column("classid"),
    sa.column("objid"),
    sa.column("refclassid"),
    sa.column("refobjid"),
    sa.column("deptype"),
)
_index = sa.table("pg_index", sa.column("indexrelid"), sa.column("indrelid"))
_trigger = sa.table(
    "pg_trigger",
    sa.column("oid"),
    sa.column("tgname"),
    sa.column("tgrelid"),
    sa.column("tgenabled"),
    sa.column("tgisinternal"),
)
_policy = sa.table(
    "pg_policy",
    sa.column("polname"),
    sa.column("polrelid"),
    sa.column("polcmd"),
    sa.column("polpermissive"),
    sa.column("polroles"),
    sa.column("polqual"),
    sa.column("polwithcheck"),
)
_proc = sa.table(
    "pg_proc",
    sa.column("oid"),
    sa.column("proname"),
    sa.column("pronamespace"),
    sa.column("prokind"),
    sa.column("proowner"),
)

#: The aspects, in the order they are reported.
ASPECTS = ("table", "column", "constraint", "index", "trigger", "function", "policy")


@dataclass(frozen=True, order=True)
class CatalogRow:
    """One object of a schema: what it is, its name, and its normalised definition."""

    kind: str
    name: str
    definition: str


def _text(value: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    return sa.func.coalesce(sa.cast(value, sa.Text), "")


def _normalised(
    value: sa.ColumnElement[Any], schema: sa.ColumnElement[str]
) -> sa.ColumnElement[str]:
    """``value`` with the schema's own name, bare or quoted, replaced by the placeholder."""
    pattern = sa.literal('(?<![\\w$"])') + schema + sa.literal('(?![\\w$"])|"') + schema + '"'
    return sa.func.regexp_replace(_text(value), pattern, PLACEHOLDER, "g")


def _fields(*values: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    return sa.func.concat_ws(_FIELD_SEPARATOR, *(_text(value) for value in values))


def _catalog_id(name: str) -> sa.ColumnElement[Any]:
    """The oid of the system catalog ``name`` (a ``regclass`` constant)."""
    return sa.cast(sa.literal(name, sa.Text), REGCLASS)


def _relations(schemas: Sequence[str]) -> sa.Select[Any]:
    """Relations of ``schemas`` but the version table, with their schema's name.

    Found through ``pg_depend``, where every table, view and sequence depends on its schema:
    its index on the referenced object finds a schema's relations, where ``pg_class``, with no
    index on the namespace, would be scanned whole for every query and made the check of a
    fleet quadratic in its size (indexes hang on their table, through ``pg_index``).
    """
    on_schema = sa.and_(
        _depend.c.refclassid == _catalog_id("pg_namespace"),
        _depend.c.refobjid == PG_NAMESPACE.c.oid,
        _depend.c.classid == _catalog_id("pg_class"),
        _depend.c.deptype == "n",
    )
    return (
        sa.select(PG_CLASS, PG_NAMESPACE.c.nspname)
        .join_from(PG_NAMESPACE, _depend, on_schema)
        .join(PG_CLASS, PG_CLASS.c.oid == _depend.c.objid)
        .where(PG_NAMESPACE.c.nspname.in_(schemas), PG_CLASS.c.relname != VERSION_TABLE)
    )


def _aspect_queries(schemas: Sequence[str]) -> list[sa.Select[Any]]:
    """One select per aspect: (schema, kind, name, definition) for every object."""
    return [
        _tables(schemas),
        _columns(schemas),
        _constraints(schemas),
        _indexes(schemas),
        _triggers(schemas),
        _functions(schemas),
        _policies(schemas),
    ]


def _tables(schemas: Sequence[str]) -> sa.Select[Any]:
    rel = (
        _relations(schemas).where(PG_CLASS.c.relkind.in_(("r", "p", "v", "m", "S", "f"))).subquery()
    )
    options = sa.func.array_to_string(
        sa.func.array(
            sa.select(sa.func.unnest(rel.c.reloptions).label("o"))
            .order_by(sa.text("1"))
            .scalar_subquery()
        ),
        ",",
    )
    return sa.select(
        rel.c.nspname,
        sa.literal("table"),
        # As text: the first query of the union types its columns, and a name is cut at 63.
        sa.cast(rel.c.relname, sa.Text),
        _fields(
            rel.c.relkind,
            rel.c.relpersistence,
            options,
            rel.c.relrowsecurity,
            rel.c.relforcerowsecurity,
        ),
    )


def _columns(schemas: Sequence[str]) -> sa.Select[Any]:
    rel = _relations(schemas).where(PG_CLASS.c.relkind.in_(("r", "p", "v", "m", "f"))).subquery()
    default = sa.func.pg_get_expr(_attrdef.c.adbin, _attrdef.c.adrelid)
    # The position among live columns: a downgrade must restore the order, not the attnum.
    position = sa.func.row_number().over(
        partition_by=_attribute.c.attrelid, order_by=_attribute.c.attnum
    )
    return (
        sa.select(
            rel.c.nspname,
            sa.literal("column"),
            rel.c.relname + "." + _attribute.c.attname,
            _fields(
                position,
                sa.func.format_type(_attribute.c.atttypid, _attribute.c.atttypmod),
                _normalised(default, rel.c.nspname),
                _attribute.c.attnotnull,
                _attribute.c.attidentity,
                _attribute.c.attgenerated,
            ),
        )
        .join_from(rel, _attribute, _attribute.c.attrelid == rel.c.oid)
        .outerjoin(
            _attrdef,
            sa.and_(
                _attrdef.c.adrelid == _attribute.c.attrelid, _attrdef.c.adnum == _attribute.c.attnum
            ),
        )
        .where(_attribute.c.attnum > 0, sa.not_(_attribute.c.attisdropped))
    )


def _constraints(schemas: Sequence[str]) -> sa.Select[Any]:
    rel = _relations(schemas).subquery()
    return sa.select(
        rel.c.nspname,
        sa.literal("constraint"),
        rel.c.relname + "." + _constraint.c.conname,
        _fields(
            _constraint.c.contype,
            _normalised(sa.func.pg_get_constraintdef(_constraint.c.oid), rel.c.nspname),
            _constraint.c.condeferrable,
            _constraint.c.condeferred,
            _constraint.c.convalidated,
        ),
    ).join_from(rel, _constraint, _constraint.c.conrelid == rel.c.oid)


def _indexes(schemas: Sequence[str]) -> sa.Select[Any]:
    rel = _relations(schemas).subquery()
    index_class = PG_CLASS.alias("index_class")
    return (
        sa.select(
            rel.c.nspname,
            sa.literal("index"),
            rel.c.relname + "." + index_class.c.relname,
            _normalised(sa.func.pg_get_indexdef(_index.c.indexrelid), rel.c.nspname),
        )
        .join_from(rel, _index, _index.c.indrelid == rel.c.oid)
        .join(index_class, index_class.c.oid == _index.c.indexrelid)
    )


def _triggers(schemas: Sequence[str]) -> sa.Select[Any]:
    rel = _relations(schemas).subquery()
    return (
        sa.select(
            rel.c.nspname,
            sa.literal("trigger"),
            rel.c.relname + "." + _trigger.c.tgname,
            _fields(
                _normalised(sa.func.pg_get_triggerdef(_trigger.c.oid), rel.c.nspname),
                _trigger.c.tgenabled,
            ),
        )
        .join_from(rel, _trigger, _trigger.c.tgrelid == rel.c.oid)
        .where(sa.not_(_trigger.c.tgisinternal))
    )


def _policies(schemas: Sequence[str]) -> sa.Select[Any]:
    rel = _relations(schemas).subquery()
    return sa.select(
        rel.c.nspname,
        sa.literal("policy"),
        rel.c.relname + "." + _policy.c.polname,
        _fields(
            _policy.c.polcmd,
            _policy.c.polpermissive,
            _policy.c.polroles,
            _normalised(sa.func.pg_get_expr(_policy.c.polqual, _policy.c.polrelid), rel.c.nspname),
            _normalised(
                sa.func.pg_get_expr(_policy.c.polwithcheck, _policy.c.polrelid), rel.c.nspname
            ),
        ),
    ).join_from(rel, _policy, _policy.c.polrelid == rel.c.oid)


def _functions(schemas: Sequence[str]) -> sa.Select[Any]:
    return (
        sa.select(
            PG_NAMESPACE.c.nspname,
            sa.literal("function"),
            _proc.c.proname + "(" + sa.func.pg_get_function_identity_arguments(_proc.c.oid) + ")",
            _normalised(sa.func.pg_get_functiondef(_proc.c.oid), PG_NAMESPACE.c.nspname),
        )
        .join_from(_proc, PG_NAMESPACE, _proc.c.pronamespace == PG_NAMESPACE.c.oid)
        .where(PG_NAMESPACE.c.nspname.in_(schemas), _proc.c.prokind.in_(("f", "p")))
    )


#: The tenant functions that read under the owner's rights (``SECURITY DEFINER``, in
#: dms/schema/sql/search.sql): the searches, which serve their indexes only when the owner
#: passes row-level security.
SEARCH_FUNCTIONS = ("search_visible_parts", "search_visible_titles")
PG_ROLES = sa.table(
    "pg_roles",
    sa.column("oid"),
    sa.column("rolname"),
    sa.column("rolsuper"),
    sa.column("rolbypassrls"),
)


def schemas_searching_slowly(conn: Connection, schemas: Sequence[str]) -> set[str]:
    """Those of ``schemas`` whose search functions' owner is held to row-level security.

    Their searches return what they should, but a user's rare word or title fragment reads
    every document instead of an index (docs/access.md, "Searching").
    """
    held = ~(PG_ROLES.c.rolsuper | PG_ROLES.c.rolbypassrls)
    found: set[str] = set()
    for start in range(0, len(schemas), SCHEMAS_PER_QUERY):
        chunk = list(schemas[start : start + SCHEMAS_PER_QUERY])
        query = (
            sa.select(PG_NAMESPACE.c.nspname)
            .select_from(_proc)
            .join(PG_NAMESPACE, _proc.c.pronamespace == PG_NAMESPACE.c.oid)
            .join(PG_ROLES, _proc.c.proowner == PG_ROLES.c.oid)
            .where(PG_NAMESPACE.c.nspname.in_(chunk), _proc.c.proname.in_(SEARCH_FUNCTIONS), held)
            .distinct()
        )
        found.update(str(schema) for schema in conn.execute(query).scalars())
    return found


def rows(conn: Connection, schema: str) -> tuple[CatalogRow, ...]:
    """Every object of ``schema``, normalised, sorted (empty if the schema does not exist)."""
    query = sa.union_all(*_aspect_queries([schema])).subquery()
    _schema, kind, name, definition = query.c
    found = conn.execute(sa.select(kind, name, definition)).all()
    return tuple(sorted(CatalogRow(str(k), str(n), str(d)) for k, n, d in found))


def fingerprints(conn: Connection, schemas: Sequence[str]) -> dict[str, str]:
    """One digest per schema of ``schemas``: equal digests, equal catalogs (``""``: empty).

    One query per :data:`SCHEMAS_PER_QUERY` schemas; catalog reads take no locks.
    """
    digests = dict.fromkeys(schemas, "")
    for start in range(0, len(schemas), SCHEMAS_PER_QUERY):
        chunk = list(schemas[start : start + SCHEMAS_PER_QUERY])
        everything = sa.union_all(*_aspect_queries(chunk)).subquery()
        schema, kind, name, definition = everything.c
        line = sa.func.concat_ws(_FIELD_SEPARATOR, kind, name, definition)
        separator = sa.literal(_ROW_SEPARATOR, sa.Text)
        digest = sa.func.md5(sa.func.string_agg(line, aggregate_order_by(separator, line)))
        query = sa.select(schema, digest).group_by(schema)
        digests.update({str(s): str(d) for s, d in conn.execute(query)})
    return digests


def fleet_fingerprints(
    engine: Engine,
    schemas: Sequence[str],
    *,
    connections: int = READ_CONNECTIONS,
    progress: Progress | None = None,
) -> dict[str, str]:
    """:func:`fingerprints` of many schemas, ``connections`` queries at once.

    The server's rendering of definitions is most of the cost, and it runs on every core.
    """
    progress = progress or NoProgress()
    chunks = [
        list(schemas[start : start + SCHEMAS_PER_QUERY])
        for start in range(0, len(schemas), SCHEMAS_PER_QUERY)
    ]

    def digest(chunk: list[str]) -> dict[str, str]:
        with engine.connect() as conn:
            return fingerprints(conn, chunk)

    digests: dict[str, str] = {}
    with ThreadPoolExecutor(max(1, min(connections, len(chunks)))) as pool:
        for chunk, found in zip(chunks, pool.map(digest, chunks), strict=True):
            digests.update(found)
            progress.advance(steps=len(chunk))
    return digests
