"""The schema that the migrations build is the schema that the table definitions declare.

Two schemas in one database: one built by running every migration, one by
``MetaData.create_all`` of :mod:`dms.schema`; their catalog fingerprints must be equal. Triggers
and functions exist only in migrations (Core cannot declare them): by name, those the rule
sources declare (dms/schema/sql).
``alembic check`` must find nothing to generate, and must find drift when there is some.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.schema import CreateSchema

from dms import migrations, provisioning
from dms.config import SHARED_SCHEMA
from dms.schema import rules, shared, tenant
from dms.schema.rules import RuleKind
from dms.testing import temporary_database
from dms.users import create_users_stand_in
from tests.migrations.fingerprint import fingerprint, run_alembic


def _migrated_database(url: URL) -> Engine:
    engine = sa.create_engine(url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenant(engine, "migrated")
    return engine


@pytest.fixture(scope="module")
def db(server_url: URL) -> Iterator[Engine]:
    """A database at head with tenant ``migrated``, plus schemas built by ``create_all``.

    Shared by the read-only tests of this module (per xdist worker): ``declared_tenant`` from
    :mod:`dms.schema.tenant`, ``declared_shared`` from :mod:`dms.schema.shared`.
    """
    with temporary_database(server_url, prefix="dms_declared") as url:
        engine = _migrated_database(url)
        _create_declared(engine, tenant.metadata, "declared_tenant", None)
        _create_declared(engine, shared.metadata, "declared_shared", SHARED_SCHEMA)
        yield engine
        engine.dispose()


def _create_declared(
    engine: Engine, metadata: sa.MetaData, schema: str, source: str | None
) -> None:
    tables = [table for table in metadata.sorted_tables if table.name != "users"]
    with engine.begin() as conn:
        conn.execute(CreateSchema(schema))
        routed = conn.execution_options(schema_translate_map={source: schema})
        metadata.create_all(routed, tables=tables, checkfirst=False)


def test_migrated_tenant_schema_equals_declared_tables(db: Engine) -> None:
    migrated = fingerprint(db, "tenant_migrated")
    declared = fingerprint(db, "declared_tenant")

    assert migrated.tables, "the migrated tenant schema is empty"
    assert migrated.structure() == declared.structure()


def test_triggers_and_functions_exist_only_in_migrations(db: Engine, on_citus: bool) -> None:
    migrated = fingerprint(db, "tenant_migrated")
    declared = fingerprint(db, "declared_tenant")
    sources = rules.load()

    # What the rule sources declare (dms/schema/sql), by name; tests/migrations/test_rules.py
    # compares their definitions.
    assert {(row[0], row[1]) for row in migrated.triggers} == {
        (rule.table, rule.name) for rule in sources if rule.kind is RuleKind.TRIGGER
    }
    citus_functions = {
        function[0] for rule in sources if (function := rule.citus_function) is not None
    }
    assert {row[0] for row in migrated.functions} == {
        rule.name for rule in sources if rule.kind is RuleKind.FUNCTION
    } | (citus_functions if on_citus else set())
    # The functions pin search_path to their own schema (normalised), not to the caller's.
    assert all("search_path TO '<schema>'" in str(row[2]) for row in migrated.functions)
    assert declared.triggers == ()
    assert declared.functions == ()


def test_migrated_shared_schema_equals_declared_tables(db: Engine) -> None:
    migrated = fingerprint(db, SHARED_SCHEMA)
    declared = fingerprint(db, "declared_shared")

    assert "tenants" in {row[0] for row in migrated.tables}
    assert migrated == declared


def test_alembic_check_finds_nothing_to_generate(db: Engine) -> None:
    result = run_alembic(db.url, "check")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "No new upgrade operations detected" in result.stdout


def test_alembic_check_reports_drift_in_a_tenant(empty_database_url: URL) -> None:
    engine = _migrated_database(empty_database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE tenant_migrated.tags ADD COLUMN colour text"))
    finally:
        engine.dispose()

    result = run_alembic(empty_database_url, "check")

    assert result.returncode != 0
    assert "New upgrade operations detected" in result.stdout
    assert "colour" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
