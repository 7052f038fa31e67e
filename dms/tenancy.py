"""Tenants: names, the registry, and routing a connection to a tenant.

A tenant ``acme`` lives in the schema ``tenant_acme``; the registry ``dms.tenants`` says which
tenants exist (its rows are written here; :mod:`dms.provisioning` creates and drops whole
tenants, schema and all). Routing is :func:`route`, which sets ``schema_translate_map`` on a
connection's execution options: no ``SET search_path``, so a pooled connection carries nothing
from one tenant to the next and the design works behind PgBouncer in transaction mode.

A server connection keeps a cache entry for every table and index it has touched, and never
lets go of one: a pooled connection that serves every tenant of a 10,000-tenant fleet grows by
that much (bench/results/fleet.md). :func:`route` therefore counts the tenants each connection
has served, and :func:`limit_tenants_per_connection` (which :func:`dms.create_engine` applies)
replaces a connection at checkout once it has served :data:`TENANTS_PER_CONNECTION`.

This module is the bottom of the tenant stack: :mod:`dms.migrations` and
:mod:`dms.provisioning` build on it, and it imports neither. A registry that is not there (the
database was never migrated) is :class:`~dms.errors.NotMigrated`, not a driver error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DisconnectionError, ProgrammingError
from sqlalchemy.pool import ConnectionPoolEntry

from dms import citus
from dms.config import SHARED_SCHEMA, Settings, settings_of
from dms.errors import InvalidTenantName, NotMigrated, TenantExists, TenantNotFound
from dms.schema.shared import TENANT_SLUG_PATTERN, tenants
from dms.schema.tenant import USERS_SCHEMA

#: A pooled connection that has served this many tenants is replaced at its next checkout.
TENANTS_PER_CONNECTION = 500
#: Where a connection's record keeps the tenants it has served (cleared with the connection).
_SERVED = "dms.tenants_served"

_SLUG = re.compile(TENANT_SLUG_PATTERN)
_SCHEMA_PREFIX = "tenant_"
_RESERVED_SLUGS = frozenset({SHARED_SCHEMA, "public", "information_schema"})


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """A registered tenant."""

    slug: str
    schema_name: str
    state: str
    created_at: datetime


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
    conn.connection.info.setdefault(_SERVED, set()).add(slug)
    return conn.execution_options(schema_translate_map=routing)


def limit_tenants_per_connection(engine: Engine, limit: int = TENANTS_PER_CONNECTION) -> None:
    """Replace a pooled connection of ``engine`` at checkout once it has served ``limit`` tenants.

    Bounds what each server connection's caches hold (see the module's docstring); the price
    is a new connection per ``limit`` tenants, and caches that start cold.
    """

    def checkout(dbapi_connection: object, record: ConnectionPoolEntry, proxy: object) -> None:
        if len(record.info.get(_SERVED, ())) >= limit:
            raise DisconnectionError(f"served {limit} tenants: replaced to free its caches")

    event.listen(engine, "checkout", checkout)


def set_lock_timeout(conn: Connection, settings: Settings | None = None) -> None:
    """Bound lock waits for the rest of the current transaction (``SET LOCAL`` semantics)."""
    settings = settings or settings_of(conn)
    value = f"{settings.lock_timeout_ms}ms"
    # On Citus the locks a tenant's DDL waits for are on its worker: set it there too.
    if not citus.set_local_on_every_node(conn, "lock_timeout", value):
        conn.execute(sa.select(sa.func.set_config("lock_timeout", value, True)))


# --- the registry -------------------------------------------------------------------------


@contextmanager
def _registry_errors() -> Iterator[None]:
    """A registry that is not there means the database was never migrated."""
    try:
        yield
    except ProgrammingError as exc:
        if isinstance(exc.orig, psycopg.errors.UndefinedTable):
            raise NotMigrated() from exc
        raise


def register(conn: Connection, slug: str) -> Tenant:
    """Add ``slug``'s registry row in ``conn``'s transaction; :class:`TenantExists` if taken."""
    with _registry_errors():
        row = conn.execute(
            insert(tenants)
            .values(slug=slug, schema_name=schema_name(slug))
            .on_conflict_do_nothing()
            .returning(*tenants.c)
        ).one_or_none()
    if row is None:
        raise TenantExists(f"tenant {slug!r} already exists")
    return Tenant(**row._mapping)


def unregister(conn: Connection, slug: str) -> None:
    """Delete ``slug``'s registry row in ``conn``'s transaction; :class:`TenantNotFound` if none."""
    with _registry_errors():
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
    query = sa.select(*tenants.c).order_by(tenants.c.slug)
    with _registry_errors():
        return [Tenant(**row._mapping) for row in conn_or_engine.execute(query)]


def registered_slugs(conn: Connection, slugs: Iterable[str]) -> set[str]:
    """Which of ``slugs`` are registered (one query)."""
    wanted = list(slugs)
    if not wanted:
        return set()
    with _registry_errors():
        return set(conn.scalars(sa.select(tenants.c.slug).where(tenants.c.slug.in_(wanted))))


def get_tenant(conn: Connection, slug: str) -> Tenant:
    """The registered tenant ``slug``, or :class:`TenantNotFound`."""
    validate_slug(slug)
    with _registry_errors():
        row = conn.execute(sa.select(*tenants.c).where(tenants.c.slug == slug)).one_or_none()
    if row is None:
        raise TenantNotFound(f"tenant {slug!r} does not exist")
    return Tenant(**row._mapping)
