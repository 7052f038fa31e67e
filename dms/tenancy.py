"""Tenants: names, the registry, and routing a connection to a tenant.

A tenant ``acme`` lives in the schema ``tenant_acme``; the registry ``dms.tenants`` says which
tenants exist (its rows are written here; :mod:`dms.provisioning` creates and drops whole
tenants, schema and all). Routing is :func:`route`, which sets ``schema_translate_map`` on a
connection's execution options: no ``SET search_path``, so a pooled connection carries nothing
from one tenant to the next and the design works behind PgBouncer in transaction mode.

A server connection keeps a cache entry for every table and index it has touched, and never
lets go of one: a pooled connection that serves every tenant of a 10,000-tenant fleet grows by
that much (bench/results/fleet.md). :func:`route` therefore counts the tenants each connection
has served (:func:`note_served` where a tenant is created, migrated or dropped), and
:func:`limit_tenants_per_connection` (which :func:`dms.create_engine` applies) replaces a
connection at checkout once it has served :data:`TENANTS_PER_CONNECTION`.

The registry also keeps a copy of each tenant schema's Alembic revision (``revision``, a column an
older shared schema lacks: :func:`records_revisions`): :func:`recorded_revisions` reads the whole
fleet's in one query. Only migrations write it (:mod:`dms.migrations.registry`), in the transaction
that moves the schema's own version table. A :class:`Tenant` leaves it out: the columns it reads
exist at every revision of the shared schema, so listing tenants works during a migration of it.

This module is the bottom of the tenant stack: :mod:`dms.migrations` and
:mod:`dms.provisioning` build on it, and it imports neither. A registry that is not there (the
database was never migrated) is :class:`~dms.errors.NotMigrated`, not a driver error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import ConnectionPoolEntry

from dms import citus
from dms.config import SHARED_SCHEMA, Settings, settings_of
from dms.driver_errors import UNDEFINED_TABLE, ErrorFactory, refused
from dms.errors import (
    InvalidTenantName,
    NotMigrated,
    TenantExists,
    TenantNotFound,
    ValidationError,
)
from dms.schema.shared import TENANT_SLUG_PATTERN, tenants
from dms.schema.tenant import USERS_SCHEMA

#: A pooled connection that has served this many tenants is replaced at its next checkout.
TENANTS_PER_CONNECTION = 500
#: Where a connection's record keeps the tenants it has served (cleared with the connection).
_SERVED = "dms.tenants_served"

_SLUG = re.compile(TENANT_SLUG_PATTERN)
#: What a :class:`Tenant` reads: the registry's columns at every revision of the shared schema.
_TENANT_COLUMNS = (tenants.c.slug, tenants.c.schema_name, tenants.c.state, tenants.c.created_at)
_pg_attribute = sa.table(
    "pg_attribute",
    sa.column("attrelid"),
    sa.column("attname"),
    sa.column("attisdropped"),
    schema="pg_catalog",
)
_SCHEMA_PREFIX = "tenant_"
_RESERVED_SLUGS = frozenset({SHARED_SCHEMA, "public", "information_schema"})


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """A registered tenant."""

    slug: str
    schema_name: str
    state: str
    created_at: datetime


#: The class of the advisory locks of :func:`lock_name`.
_NAME_LOCK = "dms.tenant-name"


def validate_slug(slug: object) -> str:
    """Return ``slug`` if it is a valid tenant key, else raise :class:`InvalidTenantName`.

    Runs before any SQL: a bad name never reaches the database, quoted or not.
    """
    if not isinstance(slug, str):
        raise InvalidTenantName(f"tenant name must be a string, not {type(slug).__name__}")
    if not _SLUG.fullmatch(slug):
        raise InvalidTenantName(
            f"invalid tenant name {slug!r}: use 1 to 40 characters a-z, 0-9 and _, "
            "starting with a letter"
        )
    if slug.startswith("pg_") or slug in _RESERVED_SLUGS:
        raise InvalidTenantName(f"tenant name {slug!r} is reserved")
    return slug


def schema_name(slug: str) -> str:
    """The PostgreSQL schema of tenant ``slug`` (validated)."""
    return _SCHEMA_PREFIX + validate_slug(slug)


def slug_of_schema(name: str) -> str | None:
    """The tenant slug of schema ``name``, or ``None`` if it is not a tenant schema."""
    if not name.startswith(_SCHEMA_PREFIX):
        return None
    slug = name.removeprefix(_SCHEMA_PREFIX)
    return slug if _SLUG.fullmatch(slug) else None


def translate_map(slug: str, settings: Settings) -> Mapping[str | None, str]:
    """The ``schema_translate_map`` that routes tenant tables to ``slug``'s schema."""
    return {None: schema_name(slug), USERS_SCHEMA: settings.users_schema}


def route(conn: Connection, slug: str, settings: Settings | None = None) -> Connection:
    """Route ``conn`` to tenant ``slug`` and return it: the one place that applies routing.

    SQLAlchemy 2 sets execution options on the connection itself, so ``conn`` stays routed
    until it is closed (returned to the pool, it carries nothing: the map is not session state).
    """
    validate_slug(slug)  # before settings_of, which may read the environment
    routing = translate_map(slug, settings or settings_of(conn))
    note_served(conn, slug)
    return conn.execution_options(schema_translate_map=routing)


def note_served(conn: Connection, slug: str) -> None:
    """Count ``slug`` among the tenants ``conn``'s server connection has served.

    :func:`route` does it; so does whatever touches a tenant's tables without routing
    (creating, migrating or dropping it), so that a fleet operation's long-lived connections
    are replaced too (:func:`limit_tenants_per_connection`).
    """
    conn.connection.info.setdefault(_SERVED, set()).add(slug)


def limit_tenants_per_connection(engine: Engine, limit: int = TENANTS_PER_CONNECTION) -> None:
    """Replace a pooled connection of ``engine`` at checkout once it has served ``limit`` tenants.

    Bounds what each server connection's caches hold (see the module's docstring); the price
    is a new connection per ``limit`` tenants, and caches that start cold.
    :class:`~dms.errors.ValidationError` unless ``limit`` is an int of at least 1 (0 would
    refuse every connection).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError(f"limit must be an int of at least 1, not {limit!r}")

    def checkout(dbapi_connection: object, record: ConnectionPoolEntry, proxy: object) -> None:
        if len(record.info.get(_SERVED, ())) >= limit:
            raise DisconnectionError(f"served {limit} tenants: replaced to free its caches")

    event.listen(engine, "checkout", checkout)


def set_lock_timeout(conn: Connection, settings: Settings | None = None) -> None:
    """Bound lock waits for the rest of the current transaction (``SET LOCAL`` semantics)."""
    settings = settings or settings_of(conn)
    value = f"{settings.lock_timeout_ms}ms"
    # On Citus the locks a tenant's DDL waits for are on its worker: set it there too.
    if not citus.set_local_on_every_node(conn, {"lock_timeout": value}):
        conn.execute(sa.select(sa.func.set_config("lock_timeout", value, True)))


# --- the registry -------------------------------------------------------------------------


#: A registry that is not there means the database was never migrated.
_REGISTRY_MISSING: Mapping[str, ErrorFactory] = {UNDEFINED_TABLE: NotMigrated}


def lock_name(conn: Connection, slug: str) -> None:
    """Hold the name ``slug`` until the end of the transaction, registered or not.

    Registering a tenant takes it, and so does each step of releasing the blobs of a dropped
    tenant of that name (:func:`dms.blobs.release_dropped_tenant`): a tenant created again
    under the name waits for the step in flight, and the next step sees it registered.
    """
    conn.execute(
        sa.select(
            sa.func.pg_advisory_xact_lock(sa.func.hashtext(_NAME_LOCK), sa.func.hashtext(slug))
        )
    )


def register(conn: Connection, slug: str) -> Tenant:
    """Add ``slug``'s registry row in ``conn``'s transaction; :class:`TenantExists` if taken."""
    lock_name(conn, slug)
    with refused(_REGISTRY_MISSING):
        row = conn.execute(
            insert(tenants)
            .values(slug=slug, schema_name=schema_name(slug))
            .on_conflict_do_nothing()
            .returning(*_TENANT_COLUMNS)
        ).one_or_none()
    if row is None:
        raise TenantExists(f"tenant {slug!r} already exists")
    return Tenant(**row._mapping)


def unregister(conn: Connection, slug: str) -> None:
    """Delete ``slug``'s registry row in ``conn``'s transaction; :class:`TenantNotFound` if none."""
    with refused(_REGISTRY_MISSING):
        deleted = conn.execute(
            sa.delete(tenants)
            .where(tenants.c.slug == validate_slug(slug))
            .returning(tenants.c.slug)
        ).one_or_none()
    if deleted is None:
        raise TenantNotFound(f"tenant {slug!r} does not exist")


def list_tenants(conn_or_engine: Connection | Engine) -> list[Tenant]:
    """Every registered tenant, ordered by slug."""
    if isinstance(conn_or_engine, Engine):
        with conn_or_engine.connect() as conn:
            return list_tenants(conn)
    query = sa.select(*_TENANT_COLUMNS).order_by(tenants.c.slug)
    with refused(_REGISTRY_MISSING):
        return [Tenant(**row._mapping) for row in conn_or_engine.execute(query)]


def registered_slugs(conn: Connection, slugs: Iterable[str]) -> set[str]:
    """Which of ``slugs`` are registered (one query)."""
    wanted = list(slugs)
    if not wanted:
        return set()
    with refused(_REGISTRY_MISSING):
        return set(conn.scalars(sa.select(tenants.c.slug).where(tenants.c.slug.in_(wanted))))


def get_tenant(conn: Connection, slug: str) -> Tenant:
    """The registered tenant ``slug``, or :class:`TenantNotFound`."""
    validate_slug(slug)
    with refused(_REGISTRY_MISSING):
        row = conn.execute(sa.select(*_TENANT_COLUMNS).where(tenants.c.slug == slug)).one_or_none()
    if row is None:
        raise TenantNotFound(f"tenant {slug!r} does not exist")
    return Tenant(**row._mapping)


# --- the registry's copy of each tenant's revision ----------------------------------------


def _registry_class() -> sa.ColumnElement[object]:
    return sa.func.to_regclass(f"{SHARED_SCHEMA}.{tenants.name}")


def registry_exists(conn: Connection) -> bool:
    """Whether the registry (the shared schema at its first revision or later) exists."""
    return conn.scalar(sa.select(_registry_class())) is not None


def records_revisions(conn: Connection) -> bool:
    """Whether the registry has its ``revision`` column (an older shared schema lacks it).

    Read from the catalog each time, never cached: the shared schema moves under running code.
    """
    column = sa.select(_pg_attribute.c.attname).where(
        _pg_attribute.c.attrelid == _registry_class(),
        _pg_attribute.c.attname == tenants.c.revision.name,
        sa.not_(_pg_attribute.c.attisdropped),
    )
    return bool(conn.scalar(sa.select(sa.exists(column))))


def lock_registry_row(conn: Connection, slug: str) -> bool:
    """Lock ``slug``'s registry row until the end of the transaction; whether it exists.

    ``FOR NO KEY UPDATE``: jobs that reference the tenant (``FOR KEY SHARE``) are not held up.
    The lock on the table that comes with it also makes a migration of the registry's own
    columns (``ALTER TABLE``) wait until this transaction ends.
    """
    if not registry_exists(conn):
        return False
    query = sa.select(tenants.c.slug).where(tenants.c.slug == slug).with_for_update(key_share=True)
    return conn.scalar(query) is not None


def record_revision(conn: Connection, slug: str, revision: str | None) -> None:
    """Write ``slug``'s revision (``None``: base) in the registry, in ``conn``'s transaction.

    Only :mod:`dms.migrations.registry` calls this, in the transaction that moves the schema's
    own version table; the registry must have its ``revision`` column.
    """
    conn.execute(
        sa.update(tenants)
        .where(
            tenants.c.slug == slug,
            tenants.c.revision.is_distinct_from(sa.literal(revision, sa.Text)),
        )
        .values(revision=revision)
    )


def recorded_revisions(conn: Connection) -> dict[str, str | None] | None:
    """Every registered tenant's revision as the registry records it, by schema name.

    One query, whatever the number of tenants. ``None`` if the registry does not record
    revisions (it does not exist, or the shared schema predates the column).
    """
    if not records_revisions(conn):
        return None
    query = sa.select(tenants.c.schema_name, tenants.c.revision)
    return {str(schema): revision for schema, revision in conn.execute(query)}
