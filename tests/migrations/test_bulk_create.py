"""Creating and dropping many tenants at once: each on its own, each exactly like a migrated one.

A tenant created in bulk (on worker processes) must fingerprint-equal, tables, constraints,
indexes, triggers and functions, a tenant that was migrated one revision after another; a bad
or taken name fails alone and is reported while the others are created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms import migrations, provisioning, tenancy
from dms.config import Settings, settings_of, with_settings
from dms.errors import AlreadyExists, TenantExists
from dms.fleet import Outcome
from dms.migrations import Scripts
from dms.migrations.template import tenant_template
from dms.testing.databases import temporary_database
from dms.users import create_users_stand_in
from tests.conftest import LONG_TEST_SECONDS
from tests.migrations.fingerprint import (
    REPO_ROOT,
    alembic_env,
    fingerprint,
    populate_tenant,
    revisions,
    schema_rows,
)
from tests.migrations.private_server import private_server

HEAD = migrations.head_revision()
BULK = tuple(f"bulk_{index}" for index in range(6))


def _step_by_step(engine: Engine, slug: str) -> None:
    """Tenant ``slug`` at base, then moved to head one revision at a time."""
    provisioning.create_tenant(engine, slug)
    migrations.downgrade(engine, "base", tenant=slug)
    for revision in Scripts.default().chain():
        migrations.upgrade(engine, revision, tenant=slug)


@pytest.fixture
def at_head(db: Engine) -> Engine:
    migrations.upgrade(db)
    return db


def test_tenants_created_in_bulk_equal_one_migrated_step_by_step(at_head: Engine) -> None:
    _step_by_step(at_head, "stepwise")
    reference = fingerprint(at_head, "tenant_stepwise")

    report = provisioning.create_tenants(at_head, BULK, jobs=2)

    # The errors are compared too, so that a failure shows why a tenant was not created.
    assert [(r.tenant, r.outcome, r.to_revision, r.error) for r in report.tenants] == [
        (slug, Outcome.CREATED, HEAD, None) for slug in BULK
    ]
    assert reference.triggers
    assert reference.functions
    for slug in BULK:
        assert fingerprint(at_head, tenancy.schema_name(slug)) == reference, slug
    schemas = [tenancy.schema_name(slug) for slug in BULK]
    assert revisions(at_head, *schemas) == dict.fromkeys(schemas, HEAD)
    # The schema the SQL was recorded on is rolled back with its savepoint.
    with at_head.connect() as conn:
        leftovers = conn.scalars(
            sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'dms\\_Template%'")
        ).all()
    assert leftovers == []


def test_the_recording_adds_one_key_to_users_and_drops_none(at_head: Engine) -> None:
    """Revision 0008 replaced the keys earlier revisions gave users; a new tenant skips them.

    A key to users costs more the more tenants there are (revision 0008 says why): a new tenant
    adds only known_users' own, as its last change, and never adds one only to drop it again.
    """
    settings = settings_of(at_head)
    with at_head.connect() as conn:
        recording = tenant_template(conn, Scripts.default(), settings).statements("tenant_probe")
        driver = conn.connection.driver_connection
        rendered = [statement.as_string(driver) for statement in recording]

    to_users = f"REFERENCES {settings.users_schema}.users"
    [at] = [index for index, text in enumerate(rendered) if to_users in text]
    assert rendered[at] == (
        'ALTER TABLE "tenant_probe".known_users ADD CONSTRAINT fk_known_users_id_users '
        f"FOREIGN KEY(id) {to_users} (id) ON DELETE CASCADE"
    )
    assert [text for text in rendered if "DROP CONSTRAINT fk_" in text] == []
    # Last but the version row: the lock it takes on users is held only from there to commit.
    assert all("alembic_version" in text for text in rendered[at + 1 :])


def test_a_new_tenant_puts_two_triggers_on_users(at_head: Engine) -> None:
    """One key to users per tenant, enforced by PostgreSQL with two triggers on users."""
    before = _triggers_on_users(at_head)

    provisioning.create_tenants(at_head, ["two_triggers"], jobs=1)

    assert _triggers_on_users(at_head) - before == 2


def _triggers_on_users(engine: Engine) -> int:
    users = f"{settings_of(engine).users_schema}.users"
    with engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(:users)")
        return int(conn.scalar(query, {"users": users}) or 0)


def test_a_bad_or_taken_name_fails_alone_and_is_reported(at_head: Engine) -> None:
    provisioning.create_tenant(at_head, "taken")
    populate_tenant(at_head, "taken")
    kept = schema_rows(at_head, "tenant_taken")

    report = provisioning.create_tenants(
        at_head, ["fresh_a", "Bad-Name", "taken", "fresh_b", "fresh_a"], jobs=2
    )

    outcomes = {r.tenant: (r.outcome, r.error) for r in report.tenants}
    assert outcomes == {
        "fresh_a": (Outcome.CREATED, None),
        "fresh_b": (Outcome.CREATED, None),
        "taken": (Outcome.EXISTS, "tenant 'taken' already exists"),
        "Bad-Name": (
            Outcome.INVALID,
            "invalid tenant name 'Bad-Name': use 1 to 40 characters a-z, 0-9 and _, "
            "starting with a letter",
        ),
    }
    assert [t.slug for t in tenancy.list_tenants(at_head)] == ["fresh_a", "fresh_b", "taken"]
    assert schema_rows(at_head, "tenant_taken") == kept


def test_if_not_exists_skips_the_tenants_that_exist(at_head: Engine) -> None:
    provisioning.create_tenant(at_head, "first")

    report = provisioning.create_tenants(at_head, ["first", "second"], if_not_exists=True)

    assert report.summary() == {"created": 1, "skipped": 1}
    assert report.problems == ()


def test_tenant_exists_is_an_already_exists(at_head: Engine) -> None:
    provisioning.create_tenant(at_head, "once")

    with pytest.raises(AlreadyExists) as caught:
        provisioning.create_tenant(at_head, "once")

    assert type(caught.value) is TenantExists


def test_drop_many_reports_each_and_drops_the_rest(at_head: Engine) -> None:
    provisioning.create_tenants(at_head, ["gone_a", "gone_b", "stays"])

    report = provisioning.drop_tenants(at_head, ["gone_a", "nope", "gone_b"], jobs=2)

    assert {r.tenant: r.outcome for r in report.tenants} == {
        "gone_a": Outcome.DROPPED,
        "gone_b": Outcome.DROPPED,
        "nope": Outcome.NOT_FOUND,
    }
    assert [r.from_revision for r in report.tenants if r.outcome is Outcome.DROPPED] == [HEAD] * 2
    assert [t.slug for t in tenancy.list_tenants(at_head)] == ["stays"]
    with at_head.connect() as conn:
        schemas = set(conn.scalars(sa.text("SELECT nspname FROM pg_namespace")))
    assert "tenant_gone_a" not in schemas
    assert "tenant_stays" in schemas


# --- the command line ---------------------------------------------------------------------


def _dms(url: URL, *arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dms", *arguments],
        cwd=REPO_ROOT,
        env=alembic_env(url),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.any_engine
def test_cli_creates_names_from_arguments_and_stdin(
    at_head: Engine, empty_database_url: URL
) -> None:
    provisioning.create_tenant(at_head, "taken")

    done = _dms(
        empty_database_url,
        "tenants",
        "create",
        "one",
        "taken",
        "--file",
        "-",
        stdin="two\nthree\n\n",
    )

    assert done.returncode == 1
    # Without the progress lines a slow run logs (seconds per tenant on Citus).
    errors = [line for line in done.stderr.splitlines() if " dms.fleet: " not in line]
    assert errors == ["error: tenant 'taken' already exists"]
    assert done.stdout.splitlines() == ["created 3 tenant(s); 1 exists"]
    assert [t.slug for t in tenancy.list_tenants(at_head)] == ["one", "taken", "three", "two"]


@pytest.mark.any_engine
def test_cli_one_tenant_keeps_its_one_line(at_head: Engine, empty_database_url: URL) -> None:
    created = _dms(empty_database_url, "tenants", "create", "solo")
    again = _dms(empty_database_url, "tenants", "create", "solo")
    bad = _dms(empty_database_url, "tenants", "create", "Solo")

    assert (created.returncode, created.stdout) == (0, "created tenant solo (schema tenant_solo)\n")
    assert (again.returncode, again.stderr) == (1, "error: tenant 'solo' already exists\n")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: invalid tenant name 'Solo'")


@pytest.mark.any_engine
def test_cli_create_json_has_one_object_per_tenant(
    at_head: Engine, empty_database_url: URL
) -> None:
    done = _dms(empty_database_url, "tenants", "create", "j_one", "j_two", "--json")

    document = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert document["operation"] == "create"
    assert document["summary"] == {"created": 2}
    assert [
        {key: item[key] for key in ("tenant", "from", "to", "outcome", "error")}
        for item in document["tenants"]
    ] == [
        {"tenant": slug, "from": None, "to": HEAD, "outcome": "created", "error": None}
        for slug in ("j_one", "j_two")
    ]
    assert all(isinstance(item["seconds"], float) for item in document["tenants"])


@pytest.mark.any_engine
def test_cli_drop_needs_yes_and_reports_each(at_head: Engine, empty_database_url: URL) -> None:
    provisioning.create_tenants(at_head, ["d_one", "d_two", "d_three"])

    refused = _dms(empty_database_url, "tenants", "drop", "d_one", "d_two")
    dropped = _dms(empty_database_url, "tenants", "drop", "d_one", "nope", "--yes")
    everything = _dms(empty_database_url, "tenants", "drop", "--all", "--yes")

    assert (refused.returncode, refused.stderr) == (
        1,
        "refusing to drop 2 tenants and all their data without --yes\n",
    )
    assert dropped.returncode == 1
    assert dropped.stderr.splitlines() == ["error: tenant 'nope' does not exist"]
    assert dropped.stdout.splitlines() == ["dropped 1 tenant(s); 1 not found; 0 blob(s) released"]
    assert (everything.returncode, everything.stdout) == (
        0,
        "dropped 2 tenant(s); 0 blob(s) released\n",
    )
    assert tenancy.list_tenants(at_head) == []


@pytest.mark.any_engine
def test_cli_list_json(at_head: Engine, empty_database_url: URL) -> None:
    provisioning.create_tenants(at_head, ["l_b", "l_a"])

    done = _dms(empty_database_url, "tenants", "list", "--json")

    listed = json.loads(done.stdout)["tenants"]
    assert done.returncode == 0
    assert [(t["tenant"], t["schema_name"], t["state"]) for t in listed] == [
        ("l_a", "tenant_l_a", "active"),
        ("l_b", "tenant_l_b", "active"),
    ]


@pytest.mark.any_engine
def test_cli_a_names_file_it_cannot_read_is_one_line_and_creates_nothing(
    at_head: Engine, empty_database_url: URL, tmp_path: Path
) -> None:
    missing, folder = tmp_path / "missing.txt", tmp_path

    for path in (missing, folder):
        done = _dms(empty_database_url, "tenants", "create", "f_one", "--file", str(path))
        assert done.returncode == 1
        assert done.stderr.startswith(f"error: cannot read tenant names from '{path}': ")
        assert len(done.stderr.splitlines()) == 1  # no traceback

    assert tenancy.list_tenants(at_head) == []


@pytest.mark.any_engine
def test_cli_a_line_of_a_names_file_that_is_not_utf8_fails_alone(
    at_head: Engine, empty_database_url: URL, tmp_path: Path
) -> None:
    names = tmp_path / "names.txt"
    names.write_bytes(b"u_one\n\xff\xfe\nu_two\n")

    done = _dms(empty_database_url, "tenants", "create", "--file", str(names))

    # Progress lines come first when creating takes seconds (on a busy Citus cluster).
    errors = [line for line in done.stderr.splitlines() if "dms.fleet: " not in line]
    assert done.returncode == 1
    assert len(errors) == 1
    assert errors[0].startswith("error: invalid tenant name '\\udcff\\udcfe'")
    assert [t.slug for t in tenancy.list_tenants(at_head)] == ["u_one", "u_two"]


@pytest.mark.slow
@pytest.mark.timeout(LONG_TEST_SECONDS)  # its script alone may take 300 s
def test_a_script_without_a_main_guard_creates_and_migrates_many_tenants(
    db: Engine, empty_database_url: URL, tmp_path: Path
) -> None:
    migrations.upgrade(db)
    script = tmp_path / "bulk.py"
    # No `if __name__ == "__main__":`: a spawned worker process would run all of it again.
    script.write_text(
        "import sys\n"
        "import sqlalchemy as sa\n"
        "import dms\n"
        "engine = sa.create_engine(sys.argv[1])\n"
        "print(dms.create_tenants(engine, [f'g{n:02}' for n in range(40)]).summary())\n"
        "print(dms.upgrade(engine).summary())\n",
        encoding="utf-8",
    )

    result = subprocess.run(
        [sys.executable, str(script), empty_database_url.render_as_string(hide_password=False)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["{'created': 40}", "{'skipped': 40}"]
    assert len(tenancy.list_tenants(db)) == 40


@pytest.mark.citus_only
def test_creations_at_once_on_citus_wait_for_each_other_not_for_the_lock_timeout(
    at_head: Engine,
) -> None:
    # On Citus a creation waits for another's transaction from its first CREATE FUNCTION on:
    # with a lock timeout of 200 ms, 5 of 6 creations at once failed there, and a loaded CI
    # machine saw one fail after the default 5 s. Creations queue for each other first.
    hasty = with_settings(at_head, Settings(lock_timeout_ms=200))
    report = provisioning.create_tenants(hasty, BULK, jobs=2)
    assert [(r.tenant, r.outcome, r.error) for r in report.tenants] == [
        (slug, Outcome.CREATED, None) for slug in BULK
    ]


@pytest.mark.citus_only
def test_a_recording_made_on_citus_is_not_replayed_on_a_plain_server(at_head: Engine) -> None:
    """Citus and PostgreSQL of one version get different SQL (revision 0016's policies): a
    process that created a tenant on Citus, then on a plain server, made the second one with
    the policies Citus needs."""
    provisioning.create_tenant(at_head, "on_citus")  # records the template on Citus
    with private_server() as server, temporary_database(server.url) as url:
        plain = sa.create_engine(url, poolclass=sa.NullPool)
        try:
            create_users_stand_in(plain)
            migrations.upgrade(plain)
            _step_by_step(plain, "stepwise")
            provisioning.create_tenant(plain, "recorded")
            assert fingerprint(plain, "tenant_recorded") == fingerprint(plain, "tenant_stepwise")
        finally:
            plain.dispose()
