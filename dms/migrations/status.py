"""Where every schema is: revisions read from the registry or the catalog, the fleet's status.

A registered tenant's revision is read from the registry's copy (``dms.tenants.revision``, kept
in step by every migration: :mod:`.registry`), all tenants in one query: :func:`tenant_revisions`,
which ``dms status`` and the fleet runner use. Reading every tenant's own version table instead
touched 10,000 tables, whose descriptions a server connection loads one by one from a catalog
of a gigabyte (about a minute at 5,000 tenants on PostgreSQL 15: bench/results/fleet.md). The
version tables are still read where the registry has no copy (schemas that are not registered,
a shared schema older than 0007), by ``dms check``, which compares the two, and for one tenant.

Reading many version tables is a few queries, never one connection per tenant: each
query is a ``UNION ALL`` over up to :data:`SCHEMAS_PER_QUERY` version tables. Each of those
tables (and its index) takes a lock until the transaction ends, and the server's lock table is
finite (``max_locks_per_transaction`` times ``max_connections``: 6,400 slots by default), so
a connection that is not in a transaction of the caller's own ends one after each query.

A server connection that has not read a table before first loads its description into its
caches (about a millisecond per table on a busy server), which dominates reading 10,000
version tables from a new connection: :func:`read_fleet_versions` spreads the queries over
:data:`READ_CONNECTIONS` connections at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms import citus, tenancy
from dms.config import SHARED_SCHEMA
from dms.fleet.progress import NoProgress, Progress
from dms.migrations.scripts import VERSION_TABLE, Scripts

#: Version tables read by one query (two locks each: the table and its primary key).
SCHEMAS_PER_QUERY = 500
#: Connections that read a fleet's revisions at once (plain SQL: threads are fine).
READ_CONNECTIONS = min(4, os.cpu_count() or 1)

_pg_class = sa.table("pg_class", sa.column("relname"), sa.column("relnamespace"))
_pg_namespace = sa.table("pg_namespace", sa.column("oid"), sa.column("nspname"))


def _version_table(schema: str) -> sa.TableClause:
    return sa.table(VERSION_TABLE, sa.column("version_num", sa.Text), schema=schema)


def schemas_with_version_table(conn: Connection) -> set[str]:
    """Every schema that has a version table."""
    query = (
        sa.select(_pg_namespace.c.nspname)
        .join_from(_pg_class, _pg_namespace, _pg_class.c.relnamespace == _pg_namespace.c.oid)
        .where(_pg_class.c.relname == VERSION_TABLE)
    )
    return set(conn.scalars(query))


def read_versions(
    conn: Connection, schemas: Iterable[str], *, progress: Progress | None = None
) -> dict[str, str | None]:
    """The current revision of each schema (``None``: none, or no version table).

    If ``conn`` is not in a transaction when called, its locks are released after each query
    (see the module's docstring); ``progress`` advances once per schema.
    """
    progress = progress or NoProgress()
    release = not conn.in_transaction()
    wanted = list(dict.fromkeys(schemas))
    present = schemas_with_version_table(conn)
    versions: dict[str, str | None] = dict.fromkeys(wanted)
    readable = [schema for schema in wanted if schema in present]
    progress.advance(steps=len(wanted) - len(readable))
    for start in range(0, len(readable), SCHEMAS_PER_QUERY):
        chunk = readable[start : start + SCHEMAS_PER_QUERY]
        selects = [
            sa.select(sa.literal(schema).label("schema"), _version_table(schema).c.version_num)
            for schema in chunk
        ]
        versions.update(
            {schema: version for schema, version in conn.execute(sa.union_all(*selects))}
        )
        if release:
            conn.rollback()
        progress.advance(steps=len(chunk))
    if release and conn.in_transaction():
        conn.rollback()
    return versions


def read_fleet_versions(
    engine: Engine, schemas: Sequence[str], *, progress: Progress | None = None
) -> dict[str, str | None]:
    """:func:`read_versions` of many schemas over :data:`READ_CONNECTIONS` connections."""
    progress = progress or NoProgress()
    chunks = [
        list(schemas[start : start + SCHEMAS_PER_QUERY])
        for start in range(0, len(schemas), SCHEMAS_PER_QUERY)
    ]
    if len(chunks) <= 1:
        with engine.connect() as conn:
            return read_versions(conn, schemas, progress=progress)

    def read(chunk: list[str]) -> dict[str, str | None]:
        with engine.connect() as conn:
            return read_versions(conn, chunk)

    versions: dict[str, str | None] = {}
    with ThreadPoolExecutor(min(READ_CONNECTIONS, len(chunks))) as pool:
        for chunk, found in zip(chunks, pool.map(read, chunks), strict=True):
            versions.update(found)
            progress.advance(steps=len(chunk))
    return versions


def tenant_revisions(
    engine: Engine, schemas: Sequence[str], *, progress: Progress | None = None
) -> dict[str, str | None]:
    """The revision of each tenant schema: the registry's copy where it has one.

    One query for every registered tenant; the version tables of the others (schemas not
    registered, or every schema if the registry does not record revisions yet) are read with
    :func:`read_fleet_versions`. ``progress`` advances once per schema.
    """
    progress = progress or NoProgress()
    with engine.connect() as conn:
        recorded = tenancy.recorded_revisions(conn) or {}
    known = {schema: recorded[schema] for schema in schemas if schema in recorded}
    progress.advance(steps=len(known))
    rest = [schema for schema in schemas if schema not in recorded]
    if not rest:
        return known
    return {**known, **read_fleet_versions(engine, rest, progress=progress)}


def registered_schemas(conn: Connection) -> dict[str, str]:
    """Every registered tenant's schema and slug; empty if there is no registry yet."""
    if not tenancy.registry_exists(conn):
        return {}
    return {tenant.schema_name: tenant.slug for tenant in tenancy.list_tenants(conn)}


def tenant_schemas_in_catalog(conn: Connection) -> set[str]:
    """Every schema named like a tenant's, registered or not."""
    names = conn.scalars(
        sa.select(_pg_namespace.c.nspname).where(
            _pg_namespace.c.nspname.startswith("tenant_", autoescape=True)
        )
    )
    return {name for name in names if tenancy.slug_of_schema(name) is not None}


@dataclass(frozen=True, kw_only=True)
class SchemaStatus:
    """Migration state of one tenant, as the registry and the catalog see it."""

    slug: str
    schema_name: str
    registered: bool
    schema_exists: bool
    revision: str | None
    at_head: bool
    #: The Citus node that holds the tenant (``host:port``); ``None`` on plain PostgreSQL.
    node: str | None = None

    @property
    def problems(self) -> tuple[str, ...]:
        """What needs attention: not at head, schema missing, not registered."""
        return tuple(
            text
            for text, bad in (
                ("not at head", not self.at_head),
                ("schema missing", not self.schema_exists),
                ("not registered", not self.registered),
            )
            if bad
        )


@dataclass(frozen=True, kw_only=True)
class FleetStatus:
    """Migration state of the shared schema and every tenant."""

    head: str
    shared_revision: str | None
    tenants: tuple[SchemaStatus, ...]

    @property
    def tenants_by_node(self) -> dict[str, int]:
        """How many tenants each Citus node holds (empty on plain PostgreSQL)."""
        counts: dict[str, int] = {}
        for item in self.tenants:
            if item.node is not None:
                counts[item.node] = counts.get(item.node, 0) + 1
        return dict(sorted(counts.items()))

    @property
    def healthy(self) -> bool:
        """Everything is at head, registered and present."""
        return self.shared_revision == self.head and all(
            t.at_head and t.registered and t.schema_exists for t in self.tenants
        )

    def as_json(self) -> dict[str, Any]:
        """``dms status --json``: head, shared revision, health, one object per tenant.

        On Citus, each tenant also names its ``node`` and ``nodes`` counts tenants per node.
        """
        document: dict[str, Any] = {
            "head": self.head,
            "shared": self.shared_revision,
            "healthy": self.healthy,
            "tenants": [_tenant_json(item) for item in self.tenants],
        }
        if self.tenants_by_node:
            document["nodes"] = self.tenants_by_node
        return document


def _tenant_json(item: SchemaStatus) -> dict[str, Any]:
    document: dict[str, Any] = {
        "tenant": item.slug,
        "schema": item.schema_name,
        "revision": item.revision,
        "registered": item.registered,
        "schema_exists": item.schema_exists,
        "at_head": item.at_head,
        "problems": list(item.problems),
    }
    if item.node is not None:
        document["node"] = item.node
    return document


def fleet_status(
    engine: Engine, *, progress: Progress | None = None, scripts: Scripts | None = None
) -> FleetStatus:
    """Every tenant's revision and whether it is at head, plus any registry/catalog mismatch.

    A registered tenant's revision is the registry's copy (:func:`tenant_revisions`: a few
    queries for the whole fleet); ``dms check`` compares it with the schema's own. On Citus,
    also the node that holds each tenant (one more catalog query).
    """
    progress = progress or NoProgress()
    head = (scripts or Scripts.default()).head()
    with engine.connect() as conn:
        registered = registered_schemas(conn)
        in_catalog = tenant_schemas_in_catalog(conn)
        placed = citus.schema_nodes(conn)
        shared = read_versions(conn, [SHARED_SCHEMA])[SHARED_SCHEMA]
    schemas = sorted(registered.keys() | in_catalog)
    progress.begin(len(schemas) + 1)
    progress.advance()
    versions = tenant_revisions(engine, schemas, progress=progress)
    progress.end()
    statuses = tuple(
        SchemaStatus(
            slug=registered.get(schema) or tenancy.slug_of_schema(schema) or schema,
            schema_name=schema,
            registered=schema in registered,
            schema_exists=schema in in_catalog,
            revision=versions[schema],
            at_head=versions[schema] == head,
            node=placed[schema].name if schema in placed else None,
        )
        for schema in schemas
    )
    return FleetStatus(head=head, shared_revision=shared, tenants=statuses)
