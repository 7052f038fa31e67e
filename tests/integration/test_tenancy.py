"""Tenants: create, drop, list, routing and isolation, and bad names refused before any SQL."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.schema import CreateSchema, DropSchema

import dms
from dms import migrations, provisioning, tenancy
from dms.config import Settings
from dms.errors import InvalidTenantName, TenantExists, TenantNotFound, UsersTableMissing
from dms.schema import rules
from dms.schema import tenant as t
from dms.schema.rules import RuleKind
from dms.testing.factories import FolderFactory
from dms.uow import UnitOfWork
from dms.users import create_user, create_users_stand_in

TENANT_TABLES = {table.name for table in t.metadata.tables.values() if table.schema is None}


def _slug() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_tenant(engine: Engine) -> Iterator[Callable[[str], str]]:
    """Names tenants for the test; drops whichever of them exist afterwards."""
    slugs: list[str] = []

    def name(slug: str) -> str:
        slugs.append(slug)
        return slug

    yield name
    for slug in slugs:
        with suppress(TenantNotFound):
            provisioning.drop_tenant(engine, slug)


def _schema_exists(conn: Connection, schema: str) -> bool:
    return conn.scalar(sa.select(sa.func.to_regnamespace(schema).is_not(None))) is True


def _tables(conn: Connection, schema: str) -> set[str]:
    pg_tables = sa.table("pg_tables", sa.column("schemaname"), sa.column("tablename"))
    query = sa.select(pg_tables.c.tablename).where(pg_tables.c.schemaname == schema)
    return set(conn.scalars(query))


def _registered(conn: Connection, slug: str) -> bool:
    return slug in {tenant.slug for tenant in tenancy.list_tenants(conn)}


def _folder_names(conn: Connection) -> list[str]:
    return sorted(conn.scalars(sa.select(t.folders.c.name)))


# --- create / drop / list -----------------------------------------------------------------


def test_create_tenant_registers_and_builds_its_schema_at_head(
    engine: Engine, new_tenant: Callable[[str], str]
) -> None:
    slug = new_tenant(_slug())

    created = provisioning.create_tenant(engine, slug)

    schema = f"tenant_{slug}"
    assert (created.slug, created.schema_name, created.state) == (slug, schema, "active")
    with engine.connect() as conn:
        assert tenancy.get_tenant(conn, slug) == created
        assert _schema_exists(conn, schema)
        assert _tables(conn, schema) == TENANT_TABLES | {"alembic_version"}
        assert migrations.read_versions(conn, [schema]) == {schema: migrations.head_revision()}


def test_create_tenant_installs_the_guard_triggers(engine: Engine, tenant: str) -> None:
    query = sa.text(
        "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal "
        "AND tgrelid IN (SELECT oid FROM pg_class "
        "WHERE relnamespace = CAST(:schema AS regnamespace))"
    )
    with engine.connect() as conn:
        triggers = set(conn.scalars(query, {"schema": tenancy.schema_name(tenant)}))

    # Every trigger the rule sources declare (dms/schema/sql), and no other.
    declared = {rule.name for rule in rules.load() if rule.kind is RuleKind.TRIGGER}
    assert triggers == declared
    assert {"file_revisions_guard", "folders_guard", "audit_guard", "search_rows_guard"} <= triggers


def test_tenant_with_the_longest_name_can_be_created(
    engine: Engine, new_tenant: Callable[[str], str]
) -> None:
    slug = new_tenant(_slug() + "x" * 27)
    assert len(slug) == 40

    provisioning.create_tenant(engine, slug)

    with engine.connect() as conn:
        assert _tables(conn, f"tenant_{slug}") == TENANT_TABLES | {"alembic_version"}


def test_creating_an_existing_tenant_raises_and_leaves_it_untouched(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with engine.begin() as raw:
        FolderFactory(conn=tenancy.route(raw, tenant), created_by=user_id, name="Keep me")
        before = tenancy.get_tenant(raw, tenant)

    with pytest.raises(TenantExists):
        provisioning.create_tenant(engine, tenant)

    with engine.connect() as raw:
        assert tenancy.get_tenant(raw, tenant) == before
        assert _folder_names(tenancy.route(raw, tenant)) == ["Keep me"]


def test_drop_tenant_removes_its_schema_and_registry_row(
    engine: Engine, new_tenant: Callable[[str], str]
) -> None:
    slug = new_tenant(_slug())
    provisioning.create_tenant(engine, slug)

    provisioning.drop_tenant(engine, slug)

    with engine.connect() as conn:
        assert not _registered(conn, slug)
        assert not _schema_exists(conn, f"tenant_{slug}")


def test_dropping_an_unknown_tenant_raises_tenant_not_found(engine: Engine) -> None:
    with pytest.raises(TenantNotFound):
        provisioning.drop_tenant(engine, _slug())


def test_getting_an_unknown_tenant_raises_tenant_not_found(engine: Engine) -> None:
    with engine.connect() as conn, pytest.raises(TenantNotFound):
        tenancy.get_tenant(conn, _slug())


def test_list_tenants_is_ordered_by_slug(engine: Engine, new_tenant: Callable[[str], str]) -> None:
    prefix = _slug()
    for suffix in ("c", "a", "b"):
        provisioning.create_tenant(engine, new_tenant(f"{prefix}_{suffix}"))

    listed = [tenant.slug for tenant in tenancy.list_tenants(engine)]
    with engine.connect() as conn:
        listed_on_connection = [tenant.slug for tenant in tenancy.list_tenants(conn)]

    assert [slug for slug in listed if slug.startswith(prefix)] == [
        f"{prefix}_a",
        f"{prefix}_b",
        f"{prefix}_c",
    ]
    assert listed == sorted(listed)
    assert listed_on_connection == listed


# --- atomic creation ----------------------------------------------------------------------


def test_create_tenant_over_an_existing_schema_leaves_nothing_behind(
    engine: Engine, new_tenant: Callable[[str], str]
) -> None:
    slug = new_tenant(_slug())
    schema = f"tenant_{slug}"
    with engine.begin() as conn:
        conn.execute(CreateSchema(schema))

    try:
        with pytest.raises(ProgrammingError) as excinfo:
            provisioning.create_tenant(engine, slug)

        assert type(excinfo.value.orig) is psycopg.errors.DuplicateSchema
        with engine.connect() as conn:
            assert not _registered(conn, slug)
            assert _tables(conn, schema) == set()
    finally:
        with engine.begin() as conn:
            conn.execute(DropSchema(schema))


def test_create_tenant_failing_midway_on_a_lock_leaves_nothing_behind(
    engine: Engine, new_tenant: Callable[[str], str]
) -> None:
    """A transaction holding a lock on users makes the foreign keys time out mid-migration."""
    slug = new_tenant(_slug())
    impatient = dataclasses.replace(Settings.from_env(), lock_timeout_ms=200)

    with engine.connect() as blocker, blocker.begin():
        # An uncommitted insert holds ROW EXCLUSIVE on users, which conflicts with the
        # SHARE ROW EXCLUSIVE that adding a foreign key to users needs.
        create_user(blocker, email=f"{uuid.uuid4().hex}@example.org", display_name="Busy")
        with pytest.raises(OperationalError) as excinfo:
            provisioning.create_tenant(engine, slug, settings=impatient)

    assert type(excinfo.value.orig) is psycopg.errors.LockNotAvailable
    with engine.connect() as conn:
        assert not _registered(conn, slug)
        assert not _schema_exists(conn, f"tenant_{slug}")


def test_create_tenant_without_users_table_leaves_nothing_behind(
    empty_database_url: URL,
) -> None:
    engine = sa.create_engine(empty_database_url, poolclass=sa.NullPool)
    try:
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE public.users"))
        slug = _slug()

        with pytest.raises(UsersTableMissing, match=r"public\.users"):
            provisioning.create_tenant(engine, slug)

        with engine.connect() as conn:
            assert tenancy.list_tenants(conn) == []
            assert not _schema_exists(conn, f"tenant_{slug}")
    finally:
        engine.dispose()


# --- routing and isolation ----------------------------------------------------------------


@pytest.fixture
def two_tenants(engine: Engine, new_tenant: Callable[[str], str]) -> tuple[str, str]:
    first, second = new_tenant(_slug()), new_tenant(_slug())
    provisioning.create_tenant(engine, first)
    provisioning.create_tenant(engine, second)
    return first, second


def test_rows_of_one_tenant_are_invisible_to_another(
    engine: Engine, two_tenants: tuple[str, str], user_id: uuid.UUID
) -> None:
    a, b = two_tenants
    with engine.begin() as raw:
        FolderFactory(conn=tenancy.route(raw, a), created_by=user_id, name="Only in A")

    with engine.connect() as raw:
        assert _folder_names(tenancy.route(raw, b)) == []
    with engine.connect() as raw:
        assert _folder_names(tenancy.route(raw, a)) == ["Only in A"]


def test_pooled_connection_carries_nothing_from_the_previous_tenant(
    engine: Engine, two_tenants: tuple[str, str], user_id: uuid.UUID
) -> None:
    a, b = two_tenants
    single = sa.create_engine(engine.url, pool_size=1, max_overflow=0)
    try:
        with single.begin() as raw:
            first_pid = raw.scalar(sa.select(sa.func.pg_backend_pid()))
            default_path = raw.scalar(sa.text("SHOW search_path"))
            routed = tenancy.route(raw, a)
            FolderFactory(conn=routed, created_by=user_id, name="A's folder")
            assert _folder_names(routed) == ["A's folder"]

        with single.connect() as raw:
            assert raw.scalar(sa.select(sa.func.pg_backend_pid())) == first_pid
            assert raw.scalar(sa.text("SHOW search_path")) == default_path
            assert _folder_names(tenancy.route(raw, b)) == []
    finally:
        single.dispose()


def test_unrouted_connection_sees_no_tenant_table(engine: Engine, tenant: str) -> None:
    with engine.connect() as conn, pytest.raises(ProgrammingError) as excinfo:
        conn.execute(sa.select(t.folders.c.id))

    assert type(excinfo.value.orig) is psycopg.errors.UndefinedTable


def test_unit_of_work_is_routed_to_its_tenant(
    engine: Engine, two_tenants: tuple[str, str], user_id: uuid.UUID
) -> None:
    a, b = two_tenants
    with UnitOfWork(engine, tenant=a) as uow:
        FolderFactory(conn=uow.connection, created_by=user_id, name="Via UoW")
        uow.commit()

    with UnitOfWork(engine, tenant=b) as uow:
        assert _folder_names(uow.connection) == []
    with UnitOfWork(engine, tenant=a) as uow:
        assert _folder_names(uow.connection) == ["Via UoW"]


# --- bad names: refused before any SQL ----------------------------------------------------

BAD_NAMES: dict[str, Any] = {
    "quote": "acme'; --",
    "double quote": 'a"b',
    "semicolon": "a;b",
    "space": "a b",
    "pg_ prefix": "pg_acme",
    "uppercase": "Acme",
    "41 characters": "a" * 41,
    "empty": "",
    "non-ascii": "acmé",
    "NUL": "acme\x00",
    "lone surrogate": "acme\ud800",
    "trailing newline": "acme\n",
    "bytes": b"acme",
    "None": None,
    "int": 7,
    "reserved dms": "dms",
    "reserved public": "public",
}


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every statement sent to the server through ``engine`` during the test."""
    sent: list[str] = []

    def record(**event_arguments: Any) -> None:
        sent.append(event_arguments["statement"])

    event.listen(engine, "before_cursor_execute", record, named=True)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


def test_statement_counter_sees_statements(engine: Engine, statements: list[str]) -> None:
    """Control: with a valid name, the same call does reach the database."""
    with pytest.raises(TenantNotFound):
        provisioning.drop_tenant(engine, _slug())

    assert statements != []


_bad = pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))


@_bad
def test_create_tenant_refuses_a_bad_name_before_any_sql(
    engine: Engine, statements: list[str], name: Any
) -> None:
    with pytest.raises(InvalidTenantName):
        provisioning.create_tenant(engine, name)

    assert statements == []


@_bad
def test_drop_tenant_refuses_a_bad_name_before_any_sql(
    engine: Engine, statements: list[str], name: Any
) -> None:
    with pytest.raises(InvalidTenantName):
        provisioning.drop_tenant(engine, name)

    assert statements == []


@_bad
def test_get_tenant_refuses_a_bad_name_before_any_sql(
    engine: Engine, statements: list[str], name: Any
) -> None:
    with engine.connect() as conn, pytest.raises(InvalidTenantName):
        tenancy.get_tenant(conn, name)

    assert statements == []


@_bad
def test_route_refuses_a_bad_name_before_any_sql(
    engine: Engine, statements: list[str], name: Any
) -> None:
    with engine.connect() as conn, pytest.raises(InvalidTenantName):
        tenancy.route(conn, name)

    assert statements == []


@_bad
def test_unit_of_work_refuses_a_bad_name_before_any_sql(
    engine: Engine, statements: list[str], name: Any
) -> None:
    with pytest.raises(InvalidTenantName):
        UnitOfWork(engine, tenant=name)

    assert statements == []


def test_bad_name_leaves_the_registry_unchanged(engine: Engine) -> None:
    before = tenancy.list_tenants(engine)

    with pytest.raises(InvalidTenantName):
        provisioning.create_tenant(engine, "evil'); DROP TABLE dms.tenants; --")

    assert tenancy.list_tenants(engine) == before


# --- connections that served many tenants -------------------------------------------------


def test_a_connection_is_replaced_after_serving_its_share_of_tenants(
    engine: Engine, two_tenants: tuple[str, str], new_tenant: Callable[[str], str]
) -> None:
    third = new_tenant(_slug())
    provisioning.create_tenant(engine, third)
    single = sa.create_engine(engine.url, pool_size=1, max_overflow=0)
    tenancy.limit_tenants_per_connection(single, limit=2)
    backends = []
    try:
        for slug in (*two_tenants, two_tenants[0], third):
            with single.connect() as raw:
                routed = tenancy.route(raw, slug)
                backends.append(routed.scalar(sa.select(sa.func.pg_backend_pid())))
                assert _folder_names(routed) == []
    finally:
        single.dispose()

    # The first connection served two tenants: at its next checkout it is replaced, and the
    # new one serves the next two.
    assert backends[0] == backends[1] != backends[2] == backends[3]


def test_creating_and_dropping_tenants_count_as_serving_them(
    engine: Engine, new_tenant: Callable[[str], str]
) -> None:
    # A fleet operation creates (or drops) thousands of tenants on a few long-lived
    # connections: each must be replaced after its share, like one that routes to them.
    first, second = new_tenant(_slug()), new_tenant(_slug())
    single = sa.create_engine(engine.url, pool_size=1, max_overflow=0)
    tenancy.limit_tenants_per_connection(single, limit=2)

    def backend() -> int:
        with single.connect() as conn:
            return int(conn.scalar(sa.select(sa.func.pg_backend_pid())) or 0)

    try:
        before = backend()
        provisioning.create_tenant(single, first)
        provisioning.create_tenant(single, second)
        after_creating = backend()
        provisioning.drop_tenant(single, first)
        provisioning.drop_tenant(single, second)
        after_dropping = backend()
    finally:
        single.dispose()

    assert before != after_creating != after_dropping


def test_dms_engines_replace_a_connection_after_their_share_of_tenants(
    database_url: URL,
) -> None:
    made = dms.create_engine(
        database_url.render_as_string(hide_password=False), pool_size=1, max_overflow=0
    )
    try:
        with made.connect() as raw:
            first = raw.scalar(sa.select(sa.func.pg_backend_pid()))
            for index in range(tenancy.TENANTS_PER_CONNECTION - 1):
                tenancy.route(raw, f"served_{index}")  # routing alone runs no SQL
        with made.connect() as raw:
            still = raw.scalar(sa.select(sa.func.pg_backend_pid()))
            tenancy.route(raw, "served_last")
        with made.connect() as raw:
            replaced = raw.scalar(sa.select(sa.func.pg_backend_pid()))
    finally:
        made.dispose()

    assert first == still != replaced
