"""Fresh tenants for tests, recycled: emptied back to the state of a new one instead of dropped.

Creating a tenant is most of the cost of a test that needs its own: about 0.2 s on plain
PostgreSQL, about a second on a Citus cluster, where creations run one at a time (every table
a distributed one; docs/scaling.md), against milliseconds for the test itself. So a test's
tenant is kept after it, and the next test of the same pytest worker that needs one gets it
back as new:

* **when it is taken**, its catalog (tables, columns, constraints, indexes, triggers and their
  state, functions, policies, privileges, text search configurations, types; its registry row;
  on Citus, the node that holds it) must still read as it did when it was created, else it is
  dropped and a new one made; then every table is emptied (``TRUNCATE``; the append-only audit
  tables, which refuse it, by ``DELETE`` with triggers off for the transaction), the rows its
  creation wrote are put back as they were (triggers off: nothing derived, nothing audited),
  and the shared rows that name it (jobs, schedules, limits, idempotency keys) are deleted;
* **when the test ends**, it is dropped instead of kept if any statement of the test's engine
  changed its schema (DDL naming it, even rolled back: on Citus, a trigger disabled and rolled
  back was seen still disabled by the next test).

A test that reads what only a new tenant has (its creation time, say) creates its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection, Engine

from dms import citus, provisioning, tenancy
from dms.errors import TenantNotFound
from dms.schema import tenant as tenant_schema
from dms.schema.ddl import execute_ddl
from dms.schema.shared import tenants as registry

#: Statements that change a schema: a tenant named in one is not recycled.
_DDL = ("ALTER", "CREATE", "DROP", "GRANT", "REVOKE", "COMMENT", "SECURITY", "REINDEX")

#: Everything a test could change in a tenant's schema besides its rows, as text to hash.
_CATALOG = sa.text(
    """
    SELECT string_agg(part, E'\\n' ORDER BY part) FROM (
      SELECT 'n' || coalesce(nspacl::text, '') AS part FROM pg_namespace WHERE oid = :ns
      UNION ALL SELECT 'c' || relname || relkind::text || coalesce(relacl::text, '')
        || relrowsecurity::text || relforcerowsecurity::text || relreplident::text
        FROM pg_class WHERE relnamespace = :ns
      UNION ALL SELECT 'a' || c.relname || a.attname || format_type(a.atttypid, a.atttypmod)
        || a.attnotnull::text || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = :ns AND a.attnum > 0 AND NOT a.attisdropped
      UNION ALL SELECT 'k' || conname || pg_get_constraintdef(oid) || convalidated::text
        FROM pg_constraint WHERE connamespace = :ns
      UNION ALL SELECT 'i' || pg_get_indexdef(i.indexrelid) || i.indisvalid::text
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = :ns
      UNION ALL SELECT 't' || t.tgname || t.tgenabled::text || pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = :ns AND NOT t.tgisinternal
      UNION ALL SELECT 'p' || proname || md5(prosrc) || pg_get_function_arguments(oid)
        || coalesce(proacl::text, '') || prosecdef::text || provolatile::text
        || coalesce(proconfig::text, '')
        FROM pg_proc WHERE pronamespace = :ns
      UNION ALL SELECT 'y' || polname || polcmd::text || polpermissive::text || coalesce(
          pg_get_expr(polqual, polrelid), '') || coalesce(pg_get_expr(polwithcheck, polrelid), '')
        FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = :ns
      UNION ALL SELECT 'f' || cfgname FROM pg_ts_config WHERE cfgnamespace = :ns
      UNION ALL SELECT 'T' || typname FROM pg_type WHERE typnamespace = :ns
      UNION ALL SELECT 'd' || defaclobjtype::text || defaclacl::text
        FROM pg_default_acl WHERE defaclnamespace = :ns
    ) parts
    """
)

#: On Citus: the node group that holds the tenant (a moved tenant is not recycled).
_PLACEMENT = sa.text(
    """
    SELECT min(p.groupid) FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
    WHERE s.logicalrelid = CAST(:table AS regclass)
    """
)


@dataclass
class _Kept:
    """A tenant made by the recycler: what it read when new."""

    slug: str
    fingerprint: str
    seeds: dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class _Shape:
    """What every tenant of the database shares: read once, from the first one."""

    tables: list[sa.Table]
    """The tenant's tables as declared (routed by schema_translate_map), in FK order."""
    refusing: frozenset[str]
    """Tables whose ``TRUNCATE`` a trigger of ours refuses (the audit trail's)."""
    referencing: list[sa.Table]
    """Shared tables with rows that name a tenant (a foreign key to the registry)."""


@dataclass
class Recycler:
    """The tenants of one pytest worker's database: kept between tests, emptied when taken."""

    engine: Engine
    idle: list[_Kept] = field(default_factory=list)
    lent: set[str] = field(default_factory=set)
    """The schemas of the tenants in use by the running test."""
    changed: set[str] = field(default_factory=set)
    """Those of them that a statement of the schema-changing kind named."""
    shape: _Shape | None = None

    def __post_init__(self) -> None:
        sa.event.listen(self.engine, "before_cursor_execute", self._watch)

    def _watch(self, conn: Connection, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(_DDL):
            self.changed.update(schema for schema in self.lent if schema in statement)

    @contextmanager
    def tenant(self) -> Iterator[str]:
        """A tenant as new for the block; kept for the next block unless its schema changed."""
        kept = self._take()
        schema = tenancy.schema_name(kept.slug)
        self.lent.add(schema)
        try:
            yield kept.slug
        finally:
            self.lent.discard(schema)
        if schema in self.changed:
            self.changed.discard(schema)
            _drop(self.engine, kept.slug)
        else:
            self.idle.append(kept)

    def _take(self) -> _Kept:
        while self.idle:
            kept = self.idle.pop()
            if self._renewed(kept):
                return kept
            _drop(self.engine, kept.slug)
        return self._new()

    def _new(self) -> _Kept:
        slug = f"t{uuid.uuid4().hex[:12]}"
        provisioning.create_tenant(self.engine, slug)
        with self.engine.connect() as conn:
            shape = self.shape = self.shape or _shape_of(conn, slug)
            routed = tenancy.route(conn, slug)
            seeds = {
                table.name: rows
                for table in shape.tables
                if (rows := [dict(row._mapping) for row in routed.execute(sa.select(table))])
            }
            return _Kept(slug, _fingerprint(conn, slug), seeds)

    def _renewed(self, kept: _Kept) -> bool:
        """Empty ``kept`` back to new; False if it can no longer pass for new."""
        assert self.shape is not None  # read with the first tenant
        try:
            with self.engine.begin() as conn:
                if _fingerprint(conn, kept.slug) != kept.fingerprint:
                    return False
                _empty(conn, kept, self.shape)
        except (sa.exc.DBAPIError, TenantNotFound):
            return False
        return True


def _fingerprint(conn: Connection, slug: str) -> str:
    schema = tenancy.schema_name(slug)
    namespace = conn.scalar(
        sa.text("SELECT oid FROM pg_namespace WHERE nspname = :name"), {"name": schema}
    )
    if namespace is None:
        raise TenantNotFound(slug)
    parts = [
        conn.scalar(_CATALOG, {"ns": namespace}) or "",
        repr(conn.execute(sa.select(registry).where(registry.c.slug == slug)).one_or_none()),
    ]
    if citus.is_citus(conn):
        parts.append(repr(conn.scalar(_PLACEMENT, {"table": f'"{schema}".documents'})))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _shape_of(conn: Connection, slug: str) -> _Shape:
    tables = [table for table in tenant_schema.metadata.sorted_tables if table.schema is None]
    refusing = frozenset(
        conn.scalars(
            sa.text(
                "SELECT DISTINCT c.relname FROM pg_trigger t"
                " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid"
                " WHERE c.relnamespace = CAST(:schema AS regnamespace) AND t.tgtype & 32 <> 0"
                " AND NOT t.tgisinternal AND p.proname NOT LIKE 'citus%'"
            ),
            {"schema": tenancy.schema_name(slug)},
        )
    )
    shared = sa.MetaData()
    shared.reflect(conn, schema=registry.schema)
    referencing = [
        table
        for table in shared.tables.values()
        if any(fk.column.table.name == registry.name for fk in table.foreign_keys)
    ]
    return _Shape(tables, refusing, referencing)


def _empty(conn: Connection, kept: _Kept, shape: _Shape) -> None:
    """Every row gone but those its creation wrote, put back; its shared rows gone."""
    for referencing in shape.referencing:
        conn.execute(sa.delete(referencing).where(referencing.c.tenant == kept.slug))
    schema = tenancy.schema_name(kept.slug)
    truncated = [
        sql.Identifier(schema, table.name)
        for table in shape.tables
        if table.name not in shape.refusing
    ]
    execute_ddl(conn, sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(truncated)))
    # Triggers off for the rest of the transaction (on Citus, on the tenant's node too): the
    # append-only audit tables refuse DELETE otherwise, and rows put back must derive nothing.
    if not citus.set_local_on_every_node(conn, {"session_replication_role": "replica"}):
        conn.execute(sa.select(sa.func.set_config("session_replication_role", "replica", True)))
    routed = tenancy.route(conn, kept.slug)
    by_name = {table.name: table for table in shape.tables}
    for name in sorted(shape.refusing):
        routed.execute(sa.delete(by_name[name]))
    for name, rows in kept.seeds.items():
        routed.execute(sa.insert(by_name[name]), rows)


def _drop(engine: Engine, slug: str) -> None:
    with contextlib.suppress(TenantNotFound):  # the test dropped it itself
        provisioning.drop_tenant(engine, slug)
