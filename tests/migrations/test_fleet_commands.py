"""Fleet commands at 150 tenants, targets checked once, drift, --json, no registry.

The fleet of :data:`FLEET` tenants is the largest that CI runs; on a Citus cluster, where a
tenant costs many times more to create and to migrate and the code paths are the same at any
size, :data:`CITUS_FLEET`. The 10,000-tenant figures come from bench/fleet.py and
bench/citus.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms import citus, migrations, provisioning, tenancy
from dms.config import SHARED_SCHEMA, Settings, with_settings
from dms.errors import MigrationError, NotMigrated, TenantNotFound
from dms.fleet import Outcome
from dms.migrations import Scripts
from dms.migrations.drift import check_drift
from dms.testing.roles import APPLICATION_ROLE, application_engine
from dms.users import create_users_stand_in
from tests.conftest import LONG_TEST_SECONDS
from tests.migrations.fingerprint import REPO_ROOT, DdlAudit, alembic_env, revisions

HEAD = migrations.head_revision()
PREVIOUS = Scripts.default().chain()[-2]
FLEET = 150
CITUS_FLEET = 60
NOT_MIGRATED = "error: the database is not migrated: run `dms migrate` first"


def _dms(url: URL, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dms", *arguments],
        cwd=REPO_ROOT,
        env=alembic_env(url),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def at_head(db: Engine) -> Engine:
    migrations.upgrade(db)
    return db


@pytest.mark.slow
@pytest.mark.timeout(LONG_TEST_SECONDS)  # five commands over the whole fleet, each up to 300 s
def test_a_fleet_of_a_hundred_and_fifty_round_trips_with_two_jobs(
    at_head: Engine, empty_database_url: URL
) -> None:
    with at_head.connect() as conn:
        fleet = CITUS_FLEET if citus.is_citus(conn) else FLEET
    names = [f"f{index:03d}" for index in range(fleet)]
    schemas = [tenancy.schema_name(slug) for slug in names]

    created = provisioning.create_tenants(at_head, names, jobs=2)
    down = _dms(empty_database_url, "downgrade", "-1", "--jobs", "2", "--json")
    at_previous = revisions(at_head, SHARED_SCHEMA, *schemas)
    up = _dms(empty_database_url, "migrate", "--jobs", "2")
    status = _dms(empty_database_url, "status", "--json")
    drift = _dms(empty_database_url, "check")
    dropped = _dms(empty_database_url, "tenants", "drop", "--all", "--yes", "--jobs", "2")

    assert created.summary() == {"created": fleet}
    assert down.returncode == 0, down.stderr
    report = json.loads(down.stdout)
    assert (report["operation"], report["target"], report["summary"]) == (
        "downgrade",
        PREVIOUS,
        {"migrated": fleet},
    )
    assert report["shared"]["to"] == PREVIOUS
    assert {(t["from"], t["to"], t["outcome"]) for t in report["tenants"]} == {
        (HEAD, PREVIOUS, "migrated")
    }
    assert at_previous == dict.fromkeys([SHARED_SCHEMA, *schemas], PREVIOUS)
    assert up.returncode == 0, up.stderr
    assert up.stdout == (
        f"migrated shared schema and every tenant to {HEAD}: {fleet} tenant(s) moved, "
        "0 already there\n"
    )
    assert status.returncode == 0, status.stderr
    listed = json.loads(status.stdout)
    assert (listed["head"], listed["shared"], listed["healthy"]) == (HEAD, HEAD, True)
    assert [t["tenant"] for t in listed["tenants"]] == names
    assert {(t["revision"], t["at_head"], tuple(t["problems"])) for t in listed["tenants"]} == {
        (HEAD, True, ())
    }
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert drift.stdout.startswith(f"checked {fleet} tenant(s) against head {HEAD} in ")
    assert drift.stdout.endswith(": no drift\n")
    assert (dropped.returncode, dropped.stdout) == (
        0,
        f"dropped {fleet} tenant(s); 0 blob(s) released\n",
    )
    assert tenancy.list_tenants(at_head) == []


# --- targets, checked once ----------------------------------------------------------------


def test_a_mistyped_revision_is_one_error_before_anything_runs(at_head: Engine) -> None:
    provisioning.create_tenants(at_head, ["t_a", "t_b", "t_c"])
    audit = DdlAudit(at_head)

    with pytest.raises(MigrationError) as down:
        migrations.downgrade(at_head, "nope")
    with pytest.raises(MigrationError) as up:
        migrations.upgrade(at_head, "00031")

    assert str(down.value) == "Can't locate revision identified by 'nope'"
    assert str(up.value) == "Can't locate revision identified by '00031'"
    assert audit.commands() == []


@pytest.mark.any_engine
def test_a_downgrade_to_base_needs_yes_and_changes_nothing_without_it(
    at_head: Engine, empty_database_url: URL
) -> None:
    provisioning.create_tenants(at_head, ["t_a", "t_b"])
    schemas = [SHARED_SCHEMA, tenancy.schema_name("t_a"), tenancy.schema_name("t_b")]
    audit = DdlAudit(at_head)
    steps = str(len(Scripts.default().chain()))

    base = _dms(empty_database_url, "downgrade", "base")
    relative = _dms(empty_database_url, "downgrade", f"-{steps}")
    one = _dms(empty_database_url, "downgrade", "base", "--tenant", "t_a")
    untouched = revisions(at_head, *schemas)
    ddl = audit.commands()
    confirmed = _dms(empty_database_url, "downgrade", "base", "--tenant", "t_a", "--yes")

    fleet = (
        "refusing to downgrade to base without --yes: it drops every table of every tenant (2) "
        "and all their data, the tenant registry and the job queue\n"
    )
    assert (base.returncode, base.stdout, base.stderr) == (1, "", fleet)
    assert (relative.returncode, relative.stderr) == (1, fleet)
    assert (one.returncode, one.stderr) == (
        1,
        "refusing to downgrade to base without --yes: it drops every table of tenant 't_a' "
        "and all its data\n",
    )
    assert untouched == dict.fromkeys(schemas, HEAD)
    assert ddl == []
    assert confirmed.returncode == 0, confirmed.stderr
    assert revisions(at_head, *schemas) == {**dict.fromkeys(schemas, HEAD), schemas[1]: None}


@pytest.mark.any_engine
def test_cli_mistyped_revision_is_one_line(at_head: Engine, empty_database_url: URL) -> None:
    provisioning.create_tenants(at_head, ["t_a", "t_b"])

    down = _dms(empty_database_url, "downgrade", "nope", "--jobs", "2")
    beyond = _dms(empty_database_url, "migrate", "--revision", "+1")

    assert (down.returncode, down.stderr) == (
        1,
        "error: Can't locate revision identified by 'nope'\n",
    )
    chain = ", ".join(Scripts.default().chain())
    assert (beyond.returncode, beyond.stderr) == (
        1,
        f"error: '+1' from {HEAD} goes beyond the chain (base, {chain})\n",
    )


def test_relative_targets_count_from_the_shared_schema_once(at_head: Engine) -> None:
    provisioning.create_tenants(at_head, ["r_a", "r_b"])
    migrations.downgrade(at_head, PREVIOUS, tenant="r_a")  # one tenant already one down

    report = migrations.downgrade(at_head, "-1")

    assert report.target == PREVIOUS
    assert {r.tenant: r.outcome for r in report.tenants} == {
        "r_a": Outcome.SKIPPED,
        "r_b": Outcome.MIGRATED,
    }
    assert revisions(at_head, "tenant_r_a", "tenant_r_b", SHARED_SCHEMA) == {
        "tenant_r_a": PREVIOUS,
        "tenant_r_b": PREVIOUS,
        SHARED_SCHEMA: PREVIOUS,
    }


def test_an_unknown_tenant_is_refused_before_anything_runs(at_head: Engine) -> None:
    with pytest.raises(TenantNotFound, match="tenant 'ghost' does not exist"):
        migrations.upgrade(at_head, tenant="ghost")


@pytest.mark.any_engine
def test_settings_of_the_engine_reach_the_worker_processes(empty_database_url: URL) -> None:
    """A users table in another schema, named by the engine's settings only, never the env."""
    plain = sa.create_engine(empty_database_url, poolclass=sa.NullPool)
    iam = with_settings(plain, Settings(users_schema="iam"))
    try:
        create_users_stand_in(plain, Settings(users_schema="iam"))
        migrations.upgrade(iam)
        report = provisioning.create_tenants(iam, ["s_a", "s_b"], jobs=2)
        migrations.downgrade(iam, PREVIOUS, jobs=2)
        migrations.upgrade(iam, jobs=2)
        with plain.connect() as conn:
            targets = set(
                conn.scalars(
                    sa.text(
                        "SELECT DISTINCT confrelid::regclass::text FROM pg_constraint "
                        "WHERE connamespace = 'tenant_s_a'::regnamespace AND contype = 'f' "
                        "AND confrelid::regclass::text LIKE '%.users'"
                    )
                )
            )
    finally:
        plain.dispose()

    assert report.summary() == {"created": 2}
    assert targets == {"iam.users"}


# --- drift --------------------------------------------------------------------------------


def test_check_warns_of_tenants_whose_searches_cannot_use_their_indexes(
    at_head: Engine, empty_database_url: URL
) -> None:
    """A search function given to an ordinary role is not drift, but it is slow: said so."""
    provisioning.create_tenants(at_head, ["s_fast", "s_slow"])
    ordinary = application_engine(at_head, [])  # only the role: no superuser, no BYPASSRLS
    ordinary.dispose()
    with at_head.begin() as conn:
        conn.execute(
            sa.text(
                "ALTER FUNCTION tenant_s_slow.search_visible_titles(text) "
                f"OWNER TO {APPLICATION_ROLE}"
            )
        )

    report = check_drift(at_head)
    done = _dms(empty_database_url, "check")
    as_json = json.loads(_dms(empty_database_url, "check", "--json").stdout)

    assert report.clean
    assert report.searching_slowly == ("s_slow",)
    assert done.returncode == 0
    assert "1 tenant(s) search without their indexes for users" in done.stderr
    assert "'s_slow'" in done.stderr
    assert "s_fast" not in done.stderr
    assert as_json["searching_slowly"] == ["s_slow"]


def test_check_lists_each_drifted_tenant_with_what_differs(
    at_head: Engine, empty_database_url: URL
) -> None:
    provisioning.create_tenants(at_head, ["c_clean", "c_column", "c_index", "c_func", "c_behind"])
    with at_head.begin() as conn:
        conn.execute(sa.text("ALTER TABLE tenant_c_column.tags ADD COLUMN colour text"))
        conn.execute(sa.text("DROP INDEX tenant_c_index.ix_documents_folder_id"))
        conn.execute(
            sa.text(
                "CREATE OR REPLACE FUNCTION tenant_c_func.folders_guard() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$"
            )
        )
    migrations.downgrade(at_head, PREVIOUS, tenant="c_behind")

    report = check_drift(at_head)
    done = _dms(empty_database_url, "check")
    as_json = json.loads(_dms(empty_database_url, "check", "--json").stdout)

    assert not report.clean
    found = {d.tenant: (d.problem, [x.describe() for x in d.differences]) for d in report.drifted}
    assert found == {
        "c_behind": (f"at {PREVIOUS}, not at head {HEAD}: run dms migrate", []),
        "c_column": ("differs from head", ["column tags.colour: unexpected"]),
        "c_func": ("differs from head", ["function folders_guard(): differs"]),
        "c_index": ("differs from head", ["index documents.ix_documents_folder_id: missing"]),
    }
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"tenant 'c_behind': at {PREVIOUS}, not at head {HEAD}: run dms migrate"
    assert "tenant 'c_column': differs from head" in lines
    assert "  column tags.colour: unexpected" in lines
    assert "    found: 6 | text |  | false |  | " in lines  # tags has 5 columns
    assert lines[-1].startswith(f"checked 5 tenant(s) against head {HEAD} in ")
    assert lines[-1].endswith(": 4 drifted")
    [column] = [t for t in as_json["drifted"] if t["tenant"] == "c_column"]
    assert column["differences"] == [
        {
            "kind": "column",
            "name": "tags.colour",
            "change": "unexpected",
            "expected": None,
            "found": "6\x1ftext\x1f\x1ffalse\x1f\x1f",
        }
    ]


@pytest.mark.any_engine
def test_check_of_a_clean_fleet_exits_0(at_head: Engine, empty_database_url: URL) -> None:
    provisioning.create_tenants(at_head, ["k_a", "k_b"])

    done = _dms(empty_database_url, "check", "--json")

    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert (report["head"], report["checked"], report["drifted"]) == (HEAD, 2, [])


# --- status, and a database that was never migrated ----------------------------------------


@pytest.mark.any_engine
def test_status_json_names_every_problem(at_head: Engine, empty_database_url: URL) -> None:
    provisioning.create_tenants(at_head, ["s_ok", "s_behind"])
    migrations.downgrade(at_head, PREVIOUS, tenant="s_behind")

    done = _dms(empty_database_url, "status", "--json")

    status = json.loads(done.stdout)
    assert done.returncode == 1
    assert status["healthy"] is False
    assert [(t["tenant"], t["revision"], t["problems"]) for t in status["tenants"]] == [
        ("s_behind", PREVIOUS, ["not at head"]),
        ("s_ok", HEAD, []),
    ]


@pytest.mark.parametrize(
    "command",
    [["tenants", "create", "acme"], ["tenants", "list"], ["tenants", "drop", "acme", "--yes"]],
    ids=["create", "list", "drop"],
)
@pytest.mark.any_engine
def test_an_unmigrated_database_is_one_line(
    db: Engine, empty_database_url: URL, command: list[str]
) -> None:
    done = _dms(empty_database_url, *command)

    assert (done.returncode, done.stderr) == (1, NOT_MIGRATED + "\n")


def test_the_library_says_not_migrated_too(db: Engine) -> None:
    with pytest.raises(NotMigrated):
        tenancy.list_tenants(db)
    with pytest.raises(NotMigrated):
        provisioning.create_tenant(db, "acme")
    with pytest.raises(NotMigrated):
        provisioning.drop_tenants(db, ["acme"])
