"""Migrating a fleet: failures stay with their tenant, concurrent runs serialise, locks time out.

Failures here are real: a hand-made table that collides with the migration's DDL, a view that
blocks a DROP, an advisory lock held by another session. Nothing is mocked.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from dms import migrations, provisioning, tenancy
from dms.config import SHARED_SCHEMA
from dms.errors import MigrationFailed, TenantFailure, UsersTableMissing
from dms.users import create_users_stand_in
from tests.migrations.fingerprint import (
    REPO_ROOT,
    DdlAudit,
    alembic_env,
    fingerprint,
    revisions,
    run_alembic,
    schema_exists,
    schema_rows,
)

HEAD = migrations.head_revision()


@pytest.fixture
def db(empty_database_url: URL) -> Iterator[Engine]:
    """An engine on a new database with the users stand-in, migrated to head."""
    engine = sa.create_engine(empty_database_url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()


def _tenants_at_base(engine: Engine, *slugs: str) -> None:
    """Register ``slugs`` and leave their schemas at base (only an empty version table)."""
    for slug in slugs:
        provisioning.create_tenant(engine, slug)
        migrations.downgrade(engine, "base", tenant=slug)


def _schemas(*slugs: str) -> list[str]:
    return [tenancy.schema_name(slug) for slug in slugs]


def _migrate_lock_key(slug: str) -> sa.ColumnElement[Any]:
    return sa.func.hashtextextended(sa.literal(f"dms.migrate:{tenancy.schema_name(slug)}"), 0)


def _hold_migrate_lock(conn: Connection, slug: str) -> None:
    """Take the session-level advisory lock that a migration of ``slug`` waits for."""
    conn.execute(sa.select(sa.func.pg_advisory_lock(_migrate_lock_key(slug))))


def _release_migrate_lock(conn: Connection, slug: str) -> None:
    assert conn.scalar(sa.select(sa.func.pg_advisory_unlock(_migrate_lock_key(slug)))) is True


def _collide_with_folders(engine: Engine, slug: str) -> None:
    """Hand-create a table that the first revision's tenant part also creates."""
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE tenant_{slug}.folders (id integer PRIMARY KEY)"))


def test_failing_tenant_rolls_back_alone_and_is_reported(db: Engine) -> None:
    _tenants_at_base(db, "alpha", "mike", "zulu")
    _collide_with_folders(db, "mike")
    mike_before = fingerprint(db, "tenant_mike")

    with pytest.raises(MigrationFailed) as caught:
        migrations.upgrade(db)

    [failure] = caught.value.failures
    assert isinstance(failure, TenantFailure)
    assert (failure.tenant, failure.revision, failure.target) == ("mike", None, HEAD)
    assert "DuplicateTable" in failure.error
    assert "mike" in str(caught.value)
    # Rolled back to where it was: no table, index or function of the failed run is left.
    assert fingerprint(db, "tenant_mike") == mike_before
    assert revisions(db, SHARED_SCHEMA, *_schemas("alpha", "mike", "zulu")) == {
        SHARED_SCHEMA: HEAD,
        "tenant_alpha": HEAD,
        "tenant_mike": None,
        "tenant_zulu": HEAD,
    }
    assert fingerprint(db, "tenant_alpha") == fingerprint(db, "tenant_zulu")


def test_cli_reports_a_failing_tenant_and_exits_non_zero(
    db: Engine, empty_database_url: URL
) -> None:
    _tenants_at_base(db, "alpha", "mike", "zulu")
    _collide_with_folders(db, "mike")
    mike_before = fingerprint(db, "tenant_mike")

    result = run_alembic(empty_database_url, "upgrade", "head")

    assert result.returncode != 0
    assert result.stdout.startswith("FAILED: 1 schema(s) failed to migrate")
    assert f"tenant 'mike': stayed at base (target {HEAD})" in result.stdout
    assert "DuplicateTable" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert fingerprint(db, "tenant_mike") == mike_before
    assert revisions(db, *_schemas("alpha", "mike", "zulu")) == {
        "tenant_alpha": HEAD,
        "tenant_mike": None,
        "tenant_zulu": HEAD,
    }


def test_failing_tenant_downgrade_keeps_the_shared_schema(db: Engine) -> None:
    for slug in ("alpha", "mike", "zulu"):
        provisioning.create_tenant(db, slug)
    with db.begin() as conn:  # a dependent view: DROP TABLE folders fails in this tenant
        conn.execute(
            sa.text("CREATE VIEW tenant_mike.names AS SELECT name FROM tenant_mike.folders")
        )
    mike_before = fingerprint(db, "tenant_mike")
    shared_before = fingerprint(db, SHARED_SCHEMA)

    with pytest.raises(MigrationFailed) as caught:
        migrations.downgrade(db, "base")

    [failure] = caught.value.failures
    assert (failure.tenant, failure.revision, failure.target) == ("mike", HEAD, "base")
    assert "DependentObjectsStillExist" in failure.error
    assert fingerprint(db, "tenant_mike") == mike_before
    # The shared schema (and the registry with it) waits until every tenant is down.
    assert fingerprint(db, SHARED_SCHEMA) == shared_before
    assert revisions(db, SHARED_SCHEMA, *_schemas("alpha", "mike", "zulu")) == {
        SHARED_SCHEMA: HEAD,
        "tenant_alpha": None,
        "tenant_mike": HEAD,
        "tenant_zulu": None,
    }
    assert [t.slug for t in tenancy.list_tenants(db)] == ["alpha", "mike", "zulu"]


def test_lock_timeout_fails_only_the_locked_tenant(
    db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    slugs = ("alpha", "bravo", "charlie")
    _tenants_at_base(db, *slugs)
    monkeypatch.setenv("DMS_LOCK_TIMEOUT_MS", "500")

    with db.connect() as holder:
        _hold_migrate_lock(holder, "bravo")
        started = time.monotonic()
        with pytest.raises(MigrationFailed) as caught:
            migrations.upgrade(db)
        waited = time.monotonic() - started
        _release_migrate_lock(holder, "bravo")
        holder.commit()

    [failure] = caught.value.failures
    assert (failure.tenant, failure.revision) == ("bravo", None)
    assert "LockNotAvailable" in failure.error
    assert "lock timeout" in failure.error
    # bravo's own time: the whole run also migrates the others (seconds each on Citus).
    assert caught.value.report is not None
    [bravo] = [item for item in caught.value.report.tenants if item.tenant == "bravo"]
    assert bravo.seconds < 4, "the 500 ms lock_timeout did not apply (the default is 5 s)"
    assert waited >= bravo.seconds
    assert revisions(db, *_schemas(*slugs)) == {
        "tenant_alpha": HEAD,
        "tenant_bravo": None,
        "tenant_charlie": HEAD,
    }
    assert fingerprint(db, "tenant_bravo").is_empty
    migrations.upgrade(db)  # with the lock gone, the rerun finishes the job
    assert migrations.fleet_status(db).healthy


_UPGRADE_IN_PYTHON = """
import sqlalchemy as sa
from dms import migrations
from dms.config import Settings
engine = sa.create_engine(Settings.from_env().database_url)
migrations.upgrade(engine)
engine.dispose()
print("upgraded")
"""


def _waiting_advisory_locks(conn: Connection) -> int:
    query = sa.text(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()"
    )
    return int(conn.scalar(query) or 0)


@pytest.mark.slow
def test_concurrent_runs_migrate_each_tenant_exactly_once(
    db: Engine, empty_database_url: URL
) -> None:
    slugs = ("t1", "t2", "t3", "t4", "t5")
    _tenants_at_base(db, *slugs)
    audit = DdlAudit(db)
    env = alembic_env(empty_database_url, {"DMS_LOCK_TIMEOUT_MS": "30000"})
    commands = (
        [sys.executable, "-m", "alembic", "-c", str(REPO_ROOT / "alembic.ini"), "upgrade", "head"],
        [sys.executable, "-c", _UPGRADE_IN_PYTHON],
    )

    with db.connect() as holder:
        # Both runs queue on the first tenant's lock: they really are concurrent.
        _hold_migrate_lock(holder, "t1")
        runs = [
            subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for argv in commands
        ]
        deadline = time.monotonic() + 60
        while _waiting_advisory_locks(holder) < len(runs) and time.monotonic() < deadline:
            assert all(run.poll() is None for run in runs), "a run ended before the lock"
            time.sleep(0.05)
        both_waited = _waiting_advisory_locks(holder) == len(runs)
        _release_migrate_lock(holder, "t1")
        holder.commit()
        outputs = [run.communicate(timeout=60) for run in runs]

    assert both_waited
    for run, (stdout, stderr) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, stdout + stderr
        assert "FAILED" not in stdout + stderr
        assert "Traceback" not in stderr
    assert revisions(db, *_schemas(*slugs)) == dict.fromkeys(_schemas(*slugs), HEAD)
    # Exactly once: each tenant's tables were created by one committed run, not two.
    created = Counter(
        command.object_identity
        for command in audit.commands()
        if command.command_tag == "CREATE TABLE"
    )
    assert {f"{schema}.folders" for schema in _schemas(*slugs)} <= created.keys()
    assert set(created.values()) == {1}
    assert not any(str(identity).startswith(f"{SHARED_SCHEMA}.") for identity in created)


def test_missing_users_table_stops_before_any_change(empty_database_url: URL) -> None:
    engine = sa.create_engine(empty_database_url)
    try:
        audit = DdlAudit(engine)
        with pytest.raises(UsersTableMissing) as caught:
            migrations.upgrade(engine)
        commands = audit.commands()
        shared_exists = schema_exists(engine, SHARED_SCHEMA)
    finally:
        engine.dispose()

    message = str(caught.value)
    assert "public.users" in message
    assert "dms users stand-in" in message
    assert commands == []
    assert not shared_exists


def test_missing_users_table_is_named_in_its_configured_schema(
    empty_database_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMS_USERS_SCHEMA", "iam")
    engine = sa.create_engine(empty_database_url)
    try:
        with pytest.raises(UsersTableMissing, match=r"iam\.users.*dms users stand-in"):
            migrations.upgrade(engine)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        provisioning.create_tenant(engine, "acme")
        healthy = migrations.fleet_status(engine).healthy
        references = schema_rows(engine, "tenant_acme")
    finally:
        engine.dispose()

    assert healthy
    assert "folders" in references


def test_fleet_status_reads_every_revision_from_the_registry(db: Engine) -> None:
    provisioning.create_tenant(db, "alpha")
    with db.begin() as conn:  # a tenant schema that the registry does not know
        conn.execute(sa.text("CREATE SCHEMA tenant_ghost"))
    few = _statements_of_fleet_status(db)
    for slug in ("bravo", "charlie", "delta", "echo"):
        provisioning.create_tenant(db, slug)
    migrations.downgrade(db, "base", tenant="charlie")

    many = _statements_of_fleet_status(db)
    status = migrations.fleet_status(db)

    assert len(many) == len(few)
    # The registry's copy: no registered tenant's own version table is opened.
    assert not [s for s in many if ".alembic_version" in s and "tenant_" in s]
    assert [s for s in many if "dms.tenants" in s and "revision" in s]
    by_slug = {t.slug: t for t in status.tenants}
    assert by_slug["charlie"].revision is None
    assert not by_slug["charlie"].at_head
    assert (by_slug["ghost"].registered, by_slug["ghost"].schema_exists) == (False, True)
    assert all(by_slug[s].at_head for s in ("alpha", "bravo", "delta", "echo"))
    assert not status.healthy


def _statements_of_fleet_status(engine: Engine) -> list[str]:
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(str(args[2]))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        migrations.fleet_status(engine)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return statements
