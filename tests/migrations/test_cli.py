"""The ``alembic`` command line, as operators run it: ``alembic -c alembic.ini ...``.

Each test runs the real command in a subprocess (this interpreter's ``-m alembic``) against a
new database named by ``DMS_DATABASE_URL``, and checks the catalog afterwards.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Engine

from dms import migrations, provisioning, tenancy
from dms.config import SHARED_SCHEMA
from tests.migrations.fingerprint import (
    DdlAudit,
    alembic_env,
    fingerprint,
    revisions,
    run_alembic,
    schema_exists,
    schema_rows,
)

HEAD = migrations.head_revision()
HEAD_SCRIPT = ScriptDirectory.from_config(migrations.alembic_config()).get_revision(HEAD)
SCHEMAS = (SHARED_SCHEMA, "tenant_alpha", "tenant_bravo")


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


@pytest.mark.slow
def test_two_first_upgrades_at_once_both_succeed(db: Engine, empty_database_url: URL) -> None:
    racers = [
        subprocess.Popen(
            [sys.executable, "-m", "dms.cli", "migrate"],
            env=alembic_env(empty_database_url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [racer.communicate(timeout=120) for racer in racers]

    assert [racer.returncode for racer in racers] == [0, 0], results
    assert revisions(db, SHARED_SCHEMA) == {SHARED_SCHEMA: HEAD}


@pytest.mark.slow
def test_upgrade_head_on_an_empty_database_then_again(db: Engine, empty_database_url: URL) -> None:
    first = run_alembic(empty_database_url, "upgrade", "head")
    provisioning.create_tenant(db, "alpha")
    shape = fingerprint(db, "tenant_alpha")
    audit = DdlAudit(db)
    second = run_alembic(empty_database_url, "upgrade", "head")

    assert first.returncode == 0, _output(first)
    assert f"-> {HEAD}," in first.stderr  # alembic logs each step it runs
    assert second.returncode == 0, _output(second)
    assert "Running upgrade" not in second.stderr
    assert audit.commands() == []  # the second run created, altered and dropped nothing
    assert fingerprint(db, "tenant_alpha") == shape
    assert migrations.fleet_status(db).healthy


@pytest.mark.any_engine
def test_downgrade_one_step(fleet: Engine, empty_database_url: URL) -> None:
    before = schema_rows(fleet, "tenant_alpha")
    result = run_alembic(empty_database_url, "downgrade", "-1")

    assert result.returncode == 0, _output(result)
    previous = HEAD_SCRIPT.down_revision if HEAD_SCRIPT else None
    assert previous is None or isinstance(previous, str)
    if previous is None:  # a one-revision chain: -1 is base, which drops the registry
        assert not schema_exists(fleet, "tenant_alpha")
        assert revisions(fleet, SHARED_SCHEMA) == {SHARED_SCHEMA: None}
    else:
        assert revisions(fleet, *SCHEMAS) == dict.fromkeys(SCHEMAS, previous)
        assert [t.slug for t in tenancy.list_tenants(fleet)] == ["alpha", "bravo"]
        after = schema_rows(fleet, "tenant_alpha")
        assert any(after.values())
        lost = {table for table, rows in after.items() if len(rows) != len(before[table])}
        assert not lost, f"tenant data was lost in {lost}"


@pytest.mark.slow
def test_downgrade_base_then_upgrade_head(fleet: Engine, empty_database_url: URL) -> None:
    down = run_alembic(empty_database_url, "downgrade", "base")
    at_base = migrations.fleet_status(fleet)
    shared_at_base = fingerprint(fleet, SHARED_SCHEMA)
    up = run_alembic(empty_database_url, "upgrade", "head")

    assert down.returncode == 0, _output(down)
    assert at_base.shared_revision is None
    assert at_base.tenants == ()
    assert shared_at_base.is_empty
    assert up.returncode == 0, _output(up)
    assert migrations.fleet_status(fleet).healthy
    assert tenancy.list_tenants(fleet) == []


@pytest.mark.slow
def test_tenant_option_migrates_one_tenant(fleet: Engine, empty_database_url: URL) -> None:
    bravo = fingerprint(fleet, "tenant_bravo")

    down = run_alembic(empty_database_url, "-x", "tenant=alpha", "downgrade", "base")
    after_down = revisions(fleet, *SCHEMAS)
    up = run_alembic(empty_database_url, "-x", "tenant=alpha", "upgrade", "head")

    assert down.returncode == 0, _output(down)
    assert after_down == {SHARED_SCHEMA: HEAD, "tenant_alpha": None, "tenant_bravo": HEAD}
    assert up.returncode == 0, _output(up)
    assert revisions(fleet, *SCHEMAS) == dict.fromkeys(SCHEMAS, HEAD)
    assert fingerprint(fleet, "tenant_alpha") == bravo
    assert fingerprint(fleet, "tenant_bravo") == bravo


@pytest.mark.any_engine
def test_dms_alembic_passes_every_argument_to_alembic(
    fleet: Engine, empty_database_url: URL
) -> None:
    def dms_alembic(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dms", "-v", "alembic", *arguments],
            env=alembic_env(empty_database_url),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    down = dms_alembic("-x", "tenant=alpha", "downgrade", "-1")
    after_down = revisions(fleet, *SCHEMAS)
    up = dms_alembic("-x", "tenant=alpha", "upgrade", "head")
    helped = dms_alembic("--help")
    command_help = dms_alembic("downgrade", "--help")

    assert down.returncode == 0, _output(down)
    assert after_down == {**dict.fromkeys(SCHEMAS, HEAD), "tenant_alpha": HEAD_SCRIPT.down_revision}
    assert up.returncode == 0, _output(up)
    assert revisions(fleet, *SCHEMAS) == dict.fromkeys(SCHEMAS, HEAD)
    assert helped.returncode == 0, _output(helped)
    assert helped.stdout.startswith("usage: dms alembic ")
    assert "-x X" in helped.stdout
    assert command_help.returncode == 0, _output(command_help)
    assert "revision" in command_help.stdout


@pytest.mark.parametrize(
    ("tenant", "message"),
    [
        ("nope", "FAILED: tenant 'nope' does not exist"),
        (
            "Bad-Name",
            "FAILED: invalid tenant name 'Bad-Name': use 1 to 40 characters a-z, 0-9 and _, "
            "starting with a letter",
        ),
    ],
    ids=["unknown", "invalid"],
)
@pytest.mark.any_engine
def test_bad_tenant_fails_on_one_line(
    db: Engine, empty_database_url: URL, tenant: str, message: str
) -> None:
    migrations.upgrade(db)
    provisioning.create_tenant(db, "alpha")
    migrations.downgrade(db, "base", tenant="alpha")
    audit = DdlAudit(db)

    result = run_alembic(empty_database_url, "-x", f"tenant={tenant}", "upgrade", "head")

    assert result.returncode != 0
    assert result.stdout.splitlines() == [message]
    assert "Traceback" not in result.stderr
    assert audit.commands() == []
    assert revisions(db, "tenant_alpha") == {"tenant_alpha": None}
