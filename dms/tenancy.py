"""Tenants: names, the registry, create/drop/list, and routing a connection to a tenant.

A tenant ``acme`` lives in the schema ``tenant_acme``; the registry ``dms.tenants`` says which
tenants exist. Routing is :func:`route`, which sets ``schema_translate_map`` on a connection's
execution options: no ``SET search_path``, so a pooled connection carries nothing from one tenant
to the next and the design works behind PgBouncer in transaction mode.

Locks on ``users``: creating a tenant adds foreign keys to the IAM's ``users`` table, which takes
a SHARE ROW EXCLUSIVE lock on it until commit; dropping one takes ACCESS EXCLUSIVE on it while the
foreign keys go. Both transactions do nothing else and run under ``lock_timeout``, so they either
finish quickly or fail without queueing behind a long transaction (and everyone else behind them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.schema import CreateSchema, DropSchema

from dms.config import SHARED_SCHEMA, Settings
from dms.errors import InvalidTenantName, TenantExists, TenantNotFound
from dms.schema.shared import TENANT_SLUG_PATTERN, tenants
from dms.schema.tenant import USERS_SCHEMA

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


def translate_map(slug: str, settings: Settings | None = None) -> Mapping[str | None, str]:
    """The ``schema_translate_map`` that routes tenant tables to ``slug``'s schema."""
    settings = settings or Settings.from_env()
    return {None: schema_name(slug), USERS_SCHEMA: settings.users_schema}


def route(conn: Connection, slug: str, settings: Settings | None = None) -> Connection:
    """Route ``conn`` to tenant ``slug`` and return it: the one place that applies routing.

    SQLAlchemy 2 sets execution options on the connection itself, so ``conn`` stays routed
    until it is closed (returned to the pool, it carries nothing: the map is not session state).
    """
    return conn.execution_options(schema_translate_map=translate_map(slug, settings))


def set_lock_timeout(conn: Connection, settings: Settings | None = None) -> None:
    """Bound lock waits for the rest of the current transaction (``SET LOCAL`` semantics)."""
    settings = settings or Settings.from_env()
    conn.execute(
        sa.select(sa.func.set_config("lock_timeout", f"{settings.lock_timeout_ms}ms", True))
    )


def create_tenant(engine: Engine, slug: str, *, settings: Settings | None = None) -> Tenant:
    """Create tenant ``slug``: registry row, schema, every table at the head revision.

    One transaction: either all of it exists afterwards, or nothing does.
    Raises :class:`InvalidTenantName` before any SQL, :class:`TenantExists` if it is taken,
    :class:`~dms.errors.UsersTableMissing` if the IAM's ``users`` table is not there.
    """
    from dms.migrations import MigrationScope, require_users_table, upgrade_schema  # noqa: PLC0415

    settings = settings or Settings.from_env()
    schema = schema_name(slug)
    with engine.begin() as conn:
        require_users_table(conn, settings)
        set_lock_timeout(conn, settings)
        row = _insert_registry_row(conn, slug, schema)
        conn.execute(CreateSchema(schema))
        upgrade_schema(conn, MigrationScope.tenant(schema, settings), "head")
    return row


def _insert_registry_row(conn: Connection, slug: str, schema: str) -> Tenant:
    row = conn.execute(
        insert(tenants)
        .values(slug=slug, schema_name=schema)
        .on_conflict_do_nothing()
        .returning(*tenants.c)
    ).one_or_none()
    if row is None:
        raise TenantExists(f"tenant {slug!r} already exists")
    return Tenant(**row._mapping)


def drop_tenant(engine: Engine, slug: str, *, settings: Settings | None = None) -> None:
    """Drop tenant ``slug``: its schema with everything in it, and its registry row.

    Raises :class:`InvalidTenantName` before any SQL and :class:`TenantNotFound` if it is not
    registered. A schema that is registered but missing is tolerated: the row goes anyway.
    """
    schema = schema_name(slug)
    with engine.begin() as conn:
        set_lock_timeout(conn, settings)
        deleted = conn.execute(
            sa.delete(tenants).where(tenants.c.slug == slug).returning(tenants.c.slug)
        ).one_or_none()
        if deleted is None:
            raise TenantNotFound(f"tenant {slug!r} does not exist")
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))


def list_tenants(conn_or_engine: Connection | Engine) -> list[Tenant]:
    """Every registered tenant, ordered by slug."""
    query = sa.select(*tenants.c).order_by(tenants.c.slug)
    if isinstance(conn_or_engine, Engine):
        with conn_or_engine.connect() as conn:
            return [Tenant(**row._mapping) for row in conn.execute(query)]
    return [Tenant(**row._mapping) for row in conn_or_engine.execute(query)]


def get_tenant(conn: Connection, slug: str) -> Tenant:
    """The registered tenant ``slug``, or :class:`TenantNotFound`."""
    validate_slug(slug)
    row = conn.execute(sa.select(*tenants.c).where(tenants.c.slug == slug)).one_or_none()
    if row is None:
        raise TenantNotFound(f"tenant {slug!r} does not exist")
    return Tenant(**row._mapping)
