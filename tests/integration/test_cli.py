"""The ``dms`` command: exit codes and messages, never a traceback for a user error."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from dms import UnitOfWork, jobs, migrations, provisioning
from dms.cli import main, parse_arguments
from dms.errors import NotFound
from dms.jobs import JobState
from dms.seed import DOCUMENTS_PER_TENANT, SEED_TENANTS
from dms.services import define_field
from dms.users import create_user, create_users_stand_in
from tests.conftest import without_role_warning


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def test_demo_on_an_empty_database_needs_the_users_table(
    empty_database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--database-url", _url(empty_database_url), "demo"]) == 1
    err = capsys.readouterr().err
    assert "public.users" in err
    assert "dms users stand-in" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_demo_after_stand_in_migrates_seeds_processes_and_summarises(
    empty_database_url: URL,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DMS_DATA_DIR", str(tmp_path))  # the demo's blobs go there
    url = _url(empty_database_url)
    assert main(["--database-url", url, "users", "stand-in"]) == 0
    assert main(["--database-url", url, "demo"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line.startswith(SEED_TENANTS)
    }
    # documents, revisions, verified, jobs done, dead: every revision's job done, none dead
    assert set(rows) == set(SEED_TENANTS)
    for documents, revisions, verified, done, dead in rows.values():
        assert documents == verified == str(DOCUMENTS_PER_TENANT)
        assert done == revisions
        assert dead == "0"
    assert "all at head" in out
    assert main(["--database-url", url, "status"]) == 0
    assert main(["--database-url", url, "jobs", "stats"]) == 0
    assert "dead 0" in capsys.readouterr().out


def _stand_in_and_acme(url: str) -> None:
    assert main(["--database-url", url, "users", "stand-in"]) == 0
    assert main(["--database-url", url, "migrate"]) == 0
    assert main(["--database-url", url, "tenants", "create", "acme"]) == 0


@pytest.mark.slow
def test_demo_fails_when_seed_jobs_are_unfinished_at_its_deadline(
    empty_database_url: URL,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DMS_DATA_DIR", str(tmp_path))
    url = _url(empty_database_url)
    _stand_in_and_acme(url)
    engine = sa.create_engine(empty_database_url)
    with engine.begin() as conn:  # a kind that no demo worker runs: it stays queued
        jobs.enqueue(conn, "test.never", {}, tenant="acme")
    engine.dispose()
    capsys.readouterr()

    assert main(["--database-url", url, "demo", "--timeout", "1"]) == 1
    (line,) = without_role_warning(capsys.readouterr().err).splitlines()
    # At least the job no worker runs; seed jobs too, if the worker has not finished them.
    assert re.fullmatch(
        r"error: [1-9][0-9]* seed job\(s\) still queued or running after 1 s; "
        r"see: dms jobs stats",
        line,
    ), line


def test_demo_refuses_a_tenant_whose_own_required_field_the_seed_cannot_fill(
    empty_database_url: URL,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DMS_DATA_DIR", str(tmp_path))
    url = _url(empty_database_url)
    _stand_in_and_acme(url)
    engine = sa.create_engine(empty_database_url)
    with engine.begin() as conn:
        owner = create_user(conn, email="owner@example.org", display_name="Owner")
    with UnitOfWork(engine, tenant="acme", user_id=owner) as uow:
        define_field(uow, name="Department", field_type="string", required=True)
        uow.commit()
    engine.dispose()
    capsys.readouterr()

    assert main(["--database-url", url, "demo"]) == 1
    assert without_role_warning(capsys.readouterr().err).splitlines() == [
        "error: cannot seed tenant 'acme': it requires field(s) 'Department', which the seed "
        "data does not fill; seed a database without a tenant 'acme', or drop it first"
    ]


@pytest.mark.parametrize("slug", ["Bad", "x;y", "pg_x", "", "a" * 41])
def test_tenants_create_rejects_bad_names(
    database_url: URL, slug: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--database-url", _url(database_url), "tenants", "create", slug]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "invalid tenant name" in err or "is reserved" in err


def test_tenants_create_list_drop(database_url: URL, capsys: pytest.CaptureFixture[str]) -> None:
    url = _url(database_url)
    slug = "cli_roundtrip"
    assert main(["--database-url", url, "tenants", "create", slug]) == 0
    assert main(["--database-url", url, "tenants", "create", slug]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["--database-url", url, "tenants", "list"]) == 0
    assert slug in capsys.readouterr().out
    assert main(["--database-url", url, "tenants", "drop", slug]) == 1  # no --yes
    assert main(["--database-url", url, "tenants", "drop", slug, "--yes"]) == 0
    assert main(["--database-url", url, "tenants", "drop", slug, "--yes"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_status_reports_schema_without_registration(
    database_url: URL, engine: sa.Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    slug = "cli_orphan"
    provisioning.create_tenant(engine, slug)
    with engine.begin() as conn:
        conn.execute(
            sa.delete(sa.table("tenants", sa.column("slug"), schema="dms")).where(
                sa.column("slug") == slug
            )
        )
    try:
        assert main(["--database-url", _url(database_url), "status"]) == 1
        out = capsys.readouterr().out
        assert f"{slug}\ttenant_{slug}" in out
        assert "not registered" in out
    finally:
        with engine.begin() as conn:
            conn.execute(sa.schema.DropSchema(f"tenant_{slug}", cascade=True))


def test_unreachable_database_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", "postgresql://nobody@127.0.0.1:1/none", "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot use the database")
    assert "Traceback" not in err


def test_not_a_postgresql_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", "sqlite:///x.db", "status"]) == 1
    assert "needs PostgreSQL" in capsys.readouterr().err


def test_jobs_dead_requeue_and_prune(
    database_url: URL, engine: sa.Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    kind = f"cli.{tenant}"
    with engine.begin() as conn:
        job_id = jobs.enqueue(conn, kind, {}, tenant=tenant, max_attempts=1).job_id
        [job] = jobs.dequeue(conn, "cli-test", kinds=[kind])
        jobs.fail(conn, job, "boom")
    assert main(["--database-url", url, "jobs", "dead", "--kind", kind]) == 0
    out = capsys.readouterr().out
    assert str(job_id) in out
    assert "boom" in out
    assert main(["--database-url", url, "jobs", "requeue"]) == 1  # neither id nor --dead
    assert main(["--database-url", url, "jobs", "requeue", str(job_id)]) == 0
    with engine.connect() as conn:
        assert jobs.get(conn, job_id).state is JobState.QUEUED
    assert main(["--database-url", url, "jobs", "requeue", str(job_id)]) == 1  # not dead now
    assert "not in the dead letter" in capsys.readouterr().err
    assert main(["--database-url", url, "jobs", "requeue", "--dead", "--kind", kind]) == 0
    assert "requeued 0 job(s)" in capsys.readouterr().out
    assert main(["--database-url", url, "jobs", "prune", "--older-than", "7d"]) == 0
    assert "pruned" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "requeue", "not-a-uuid"],
        ["jobs", "prune", "--older-than", "soon"],
        ["jobs", "prune", "--older-than", "-5m"],
        ["jobs", "prune", "--older-than", "1e400"],
        ["jobs", "prune", "--older-than", "nan"],
        ["jobs", "requeue", "--dead", "--older-than", "9999999999999999999999d"],
        ["healthcheck", "--max-queue-age", "9999999999999999999999"],
        ["jobs", "enqueue", "k", "--tenant", "acme", "--payload", "[" * 10**5 + "]" * 10**5],
        ["worker", "--concurrency", "0"],
        ["jobs", "dead", "--limit", "x"],
    ],
)
def test_bad_job_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        main(argv)
    assert excinfo.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        ["trash", "purge", "--tenant", "acme", "--older-than"],
        ["jobs", "prune", "--older-than"],
        ["healthcheck", "--max-queue-age"],
    ],
)
@pytest.mark.parametrize("bare", ["5", "0", "1.5", "5 d", "5D", "1e3s", "infs", "5dd"])
def test_a_duration_needs_its_unit(
    command: list[str], bare: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--older-than 5`` once meant five seconds, silently: a number alone is refused."""
    with pytest.raises(SystemExit) as excinfo:
        main([*command, bare])
    assert excinfo.value.code == 2
    assert f"not a duration: {bare!r} (a number and its unit: 45s, 15m, 12h, 30d" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ("45s", timedelta(seconds=45)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        ("1.5h", timedelta(minutes=90)),
        ("0s", timedelta(0)),
    ],
)
def test_a_duration_is_a_number_and_its_unit(text: str, meant: timedelta) -> None:
    args = parse_arguments(["trash", "purge", "--tenant", "acme", "--older-than", text])
    assert args.older_than == meant


def test_pruning_dead_jobs_is_confirmed_and_a_dry_run_counts(
    empty_database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = sa.create_engine(empty_database_url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenant(engine, "acme")
    with engine.begin() as conn:
        job_id = jobs.enqueue(conn, "cli.prune", {}, tenant="acme", max_attempts=1).job_id
        [job] = jobs.dequeue(conn, "cli-test", kinds=["cli.prune"])
        jobs.fail(conn, job, "boom")
    prune = ["--database-url", _url(empty_database_url), "jobs", "prune", "--older-than", "0s"]

    assert main([*prune, "--include-dead"]) == 1
    refused = capsys.readouterr().err
    assert main([*prune, "--include-dead", "--dry-run"]) == 0
    counted = capsys.readouterr().out
    with engine.connect() as conn:
        still_dead = jobs.get(conn, job_id).state
    assert main([*prune, "--include-dead", "--yes"]) == 0
    pruned = capsys.readouterr().out
    with engine.connect() as conn, pytest.raises(NotFound):
        jobs.get(conn, job_id)
    engine.dispose()

    assert refused == "refusing to delete 1 finished or dead job(s) for good without --yes\n"
    assert counted == "would prune 1 job(s) and 0 expired idempotency key(s)\n"
    assert still_dead is JobState.DEAD
    assert pruned == "pruned 1 job(s) and 0 expired idempotency key(s)\n"
