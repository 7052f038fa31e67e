"""The ``dms`` command as an operator meets it: one line per mistake, logs, JSON, version."""

from __future__ import annotations

import argparse
import json
import logging
import os
import pty
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.pool import QueuePool

from dms import jobs, migrations, provisioning, tenancy
from dms.cli import EXIT_CLOSED_PIPE, build_parser, main
from dms.cli.context import Context
from dms.cli.jobs import WORKER_EXTRA_CONNECTIONS, worker_engine
from dms.config import Settings
from dms.jobs import JobState
from dms.testing import temporary_database
from dms.users import create_users_stand_in

#: Output and arguments of the command line, the same on any engine: not in the Citus run.
pytestmark = pytest.mark.any_engine

NOT_MIGRATED = "error: the database is not migrated: run `dms migrate` first"


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _schemas(url: URL) -> list[str]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    names = sa.inspect(engine).get_schema_names()
    engine.dispose()
    return names


@pytest.fixture
def new_unmigrated_url(empty_database_url: URL) -> str:
    """A database of this test's own with the users stand-in and nothing of dms."""
    engine = sa.create_engine(empty_database_url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    engine.dispose()
    return _url(empty_database_url)


@pytest.fixture(scope="module")
def unmigrated_database(server_url: URL) -> Iterator[tuple[URL, list[str]]]:
    """A database with the users stand-in and nothing of dms, and its schemas."""
    with temporary_database(server_url, prefix="dms_empty") as url:
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        create_users_stand_in(engine)
        engine.dispose()
        yield url, _schemas(url)


@pytest.fixture
def unmigrated_url(unmigrated_database: tuple[URL, list[str]]) -> str:
    """The module's unmigrated database, still without a schema of dms.

    Shared by the tests of the module that are refused on it (15 of them: a new database each
    cost a second with its drop, more on Citus); the schemas are checked before each, so that a
    command that wrote to it fails the next test instead of passing unseen. A test whose command
    writes (``alembic current`` creates the version table's schema) takes
    :func:`new_unmigrated_url`.
    """
    url, schemas = unmigrated_database
    assert _schemas(url) == schemas
    return _url(url)


@pytest.mark.parametrize(
    "command",
    [
        ["tenants", "create", "acme"],
        ["tenants", "list"],
        ["jobs", "stats"],
        ["jobs", "dead"],
        ["jobs", "prune"],
        ["jobs", "requeue", "--dead"],
        ["jobs", "list", "--state", "queued"],
        ["jobs", "cancel", str(uuid.uuid4())],
        ["seed"],
        ["worker"],
    ],
)
def test_an_unmigrated_database_gets_one_line_and_exit_1(
    unmigrated_url: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--database-url", unmigrated_url, *command]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [NOT_MIGRATED]


@pytest.mark.parametrize(
    "command",
    [
        ["jobs", "stats", "--tenant", "nope"],
        ["jobs", "dead", "--tenant", "nope"],
        ["jobs", "requeue", "--dead", "--tenant", "nope"],
        ["jobs", "list", "--state", "dead", "--tenant", "nope"],
    ],
)
def test_a_filter_on_a_tenant_that_does_not_exist_says_so(
    database_url: URL, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--database-url", _url(database_url), *command]) == 1
    assert capsys.readouterr().err.splitlines() == ["error: tenant 'nope' does not exist"]


def test_jobs_stats_and_dead_as_json(
    database_url: URL, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = sa.create_engine(database_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        jobs.enqueue(conn, "test.cli.json", {"n": 1}, tenant=tenant)
    engine.dispose()
    url = _url(database_url)
    capsys.readouterr()

    assert main(["--database-url", url, "jobs", "stats", "--tenant", tenant, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert main(["--database-url", url, "jobs", "dead", "--tenant", tenant, "--json"]) == 0
    dead = json.loads(capsys.readouterr().out)

    assert stats["counts"] == [
        {"tenant": tenant, "kind": "test.cli.json", "state": "queued", "count": 1}
    ]
    assert isinstance(stats["oldest_queued_age"], float)
    assert dead == {"jobs": []}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == "dms 0.1.0"


def test_python_dash_m_dms_and_help_without_markup() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dms", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert result.stdout.startswith("usage: dms ")
    assert "``" not in result.stdout
    assert ":func:" not in result.stdout


def test_every_argument_has_help() -> None:
    missing: list[str] = []

    def visit(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                # A group of subcommands: each of them needs its own line of help.
                missing.extend(
                    f"{path} {choice.dest}" for choice in action._choices_actions if not choice.help
                )
                for name, sub in action.choices.items():
                    visit(sub, f"{path} {name}")
            elif action.help is None:
                missing.append(f"{path} {action.dest}")

    visit(build_parser(), "dms")
    assert missing == []


@pytest.mark.parametrize(
    ("flags", "level"),
    [([], "WARNING"), (["-v"], "INFO"), (["-vv"], "DEBUG"), (["--log-level", "error"], "ERROR")],
)
def test_log_level_from_flags(
    flags: list[str], level: str, unmigrated_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main([*flags, "--database-url", unmigrated_url, "server", "status"])
    assert logging.getLevelName(logging.getLogger().level) == level
    capsys.readouterr()


def test_json_log_lines(new_unmigrated_url: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dms",
            "-v",
            "--log-format",
            "json",
            "--database-url",
            new_unmigrated_url,
            "alembic",
            "current",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [json.loads(line) for line in result.stderr.splitlines()]

    assert result.returncode == 0, result.stderr
    assert lines
    assert {"time", "level", "logger", "message"} <= set(lines[0])


def test_error_lines_are_json_lines_when_asked(unmigrated_url: str) -> None:
    def run(*log_format: str) -> subprocess.CompletedProcess[str]:
        command = ["--database-url", unmigrated_url, *log_format, "tenants", "list"]
        return subprocess.run(
            [sys.executable, "-m", "dms", *command],
            capture_output=True,
            text=True,
            check=False,
        )

    plain, as_json = run(), run("--log-format", "json")
    lines = [json.loads(line) for line in as_json.stderr.splitlines()]

    assert (plain.returncode, plain.stderr) == (1, NOT_MIGRATED + "\n")
    assert as_json.returncode == 1
    assert len(lines) == 1
    assert (lines[0]["level"], lines[0]["logger"], lines[0]["message"]) == (
        "ERROR",
        "dms.cli.operator",
        NOT_MIGRATED,
    )
    assert {"time", "level", "logger", "message"} == set(lines[0])


@pytest.mark.parametrize(
    ("asked", "environment"),
    [(["--log-format", "json"], {}), (["--log-format=json"], {}), ([], {"DMS_LOG_FORMAT": "json"})],
)
def test_usage_errors_are_json_lines_when_asked(
    asked: list[str], environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    refusal = "error: dms tenants: argument tenants_command: invalid choice: 'nope' (choose from "

    plain = subprocess.run(
        [sys.executable, "-m", "dms", "--log-format", "plain", "tenants", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    as_json = subprocess.run(
        [sys.executable, "-m", "dms", *asked, "tenants", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert plain.returncode == 2
    assert plain.stderr.splitlines()[0].startswith("usage: dms tenants ")
    assert plain.stderr.splitlines()[1].startswith("dms tenants: error: argument tenants_command")
    assert as_json.returncode == 2
    [line] = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert (line["level"], line["logger"]) == ("ERROR", "dms.cli.operator")
    assert line["message"].startswith(refusal)


def test_jobs_enqueue_once_per_key_and_show(
    database_url: URL, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    enqueue = ["--database-url", url, "jobs", "enqueue", "test.cli.enqueue", "--tenant", tenant]
    keyed = [*enqueue, "--payload", '{"n": 1}', "--idempotency-key", "k1"]
    capsys.readouterr()

    assert main(keyed) == 0
    first = capsys.readouterr().out.strip()
    assert main(keyed) == 0
    again = capsys.readouterr().out.strip()
    job_id = first.rsplit(" ", 1)[1]
    assert main(["--database-url", url, "jobs", "show", job_id]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert main(["--database-url", url, "jobs", "show", job_id, "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)

    assert first == f"enqueued job {job_id}"
    assert again == f"already enqueued job {job_id}"
    assert shown[0] == f"job {job_id}: test.cli.enqueue for tenant {tenant}"
    assert shown[1] == "state queued, attempt 0 of 25"
    assert 'payload {"n": 1}' in shown
    assert (as_json["id"], as_json["state"], as_json["payload"]) == (job_id, "queued", {"n": 1})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--payload", "{nope"], "argument --payload: not JSON: "),
        (["--run-at", "2026-12-24T18:00"], "argument --run-at: give a UTC offset: "),
        (["--run-at", "Christmas"], "argument --run-at: not an ISO 8601 date and time: "),
    ],
)
def test_jobs_enqueue_rejects_bad_arguments_in_one_line(
    database_url: URL,
    tenant: str,
    arguments: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = ["--database-url", _url(database_url), "jobs", "enqueue", "k", "--tenant", tenant]
    with pytest.raises(SystemExit) as exited:
        main([*command, *arguments])

    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1].startswith(f"dms jobs enqueue: error: {message}")
    )


def test_jobs_enqueue_for_a_missing_tenant_and_show_of_a_missing_job(
    database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    missing = uuid.uuid4()

    assert main(["--database-url", url, "jobs", "enqueue", "k", "--tenant", "nope"]) == 1
    assert capsys.readouterr().err.splitlines() == ["error: tenant 'nope' does not exist"]
    assert main(["--database-url", url, "jobs", "show", str(missing)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"error: job {missing} does not exist"]


def _enqueued(database_url: URL, tenant: str, kind: str) -> uuid.UUID:
    engine = sa.create_engine(database_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        job_id = jobs.enqueue(conn, kind, {}, tenant=tenant).job_id
    engine.dispose()
    return job_id


def test_jobs_cancel_then_list_by_state(
    database_url: URL, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    kind = f"test.cli.{uuid.uuid4().hex[:8]}"
    job_id = _enqueued(database_url, tenant, kind)
    listing = ["--database-url", url, "jobs", "list", "--tenant", tenant, "--kind", kind]
    capsys.readouterr()

    assert main([*listing, "--state", "queued"]) == 0
    queued = capsys.readouterr().out.splitlines()
    assert main(["--database-url", url, "jobs", "cancel", str(job_id)]) == 0
    cancelled = capsys.readouterr().out.splitlines()
    assert main(["--database-url", url, "jobs", "cancel", str(job_id), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert main(["--database-url", url, "jobs", "cancel", str(job_id)]) == 0
    twice = capsys.readouterr().out.splitlines()
    assert main([*listing, "--state", "cancelled", "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main([*listing, "--state", "queued"]) == 0
    none_left = capsys.readouterr().out.splitlines()
    assert main(listing) == 0
    every_state = capsys.readouterr().out.splitlines()

    assert queued == [f"{job_id}\t{tenant}\t{kind}\tqueued\t0\t", "1 queued job(s) shown"]
    assert cancelled == [f"cancelled job {job_id} (was queued)"]
    assert (again["id"], again["state"]) == (str(job_id), "cancelled")
    assert twice == [f"job {job_id} was already cancelled"]
    assert [(job["id"], job["state"]) for job in as_json["jobs"]] == [(str(job_id), "cancelled")]
    assert none_left == ["0 queued job(s) shown"]
    assert every_state == [f"{job_id}\t{tenant}\t{kind}\tcancelled\t0\t", "1 job(s) shown"]


def test_jobs_cancel_and_requeue_by_filter_count_first_and_need_yes(
    database_url: URL, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    kind = f"test.cli.{uuid.uuid4().hex[:8]}"
    ids = [_enqueued(database_url, tenant, kind) for _ in range(2)]
    cancel = ["--database-url", url, "jobs", "cancel", "--tenant", tenant, "--kind", kind]
    requeue = ["--database-url", url, "jobs", "requeue", "--dead", "--kind", kind]
    scope = f"of tenant {tenant}, of kind {kind}"
    capsys.readouterr()

    assert main([*cancel, "--dry-run"]) == 0
    dry = capsys.readouterr().out.splitlines()
    assert main(cancel) == 1
    refused = capsys.readouterr().err.splitlines()
    engine = sa.create_engine(database_url, poolclass=sa.NullPool)
    with engine.connect() as conn:
        still = [jobs.get(conn, job_id).state for job_id in ids]
    assert main([*cancel, "--state", "queued", "--yes", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    with engine.connect() as conn:
        after = [jobs.get(conn, job_id).state for job_id in ids]
    engine.dispose()
    assert main(requeue) == 0  # nothing is dead: nothing to confirm
    nothing = capsys.readouterr().out.splitlines()
    assert main(["--database-url", url, "jobs", "cancel"]) == 1
    neither = capsys.readouterr().err.splitlines()
    spared = _enqueued(database_url, tenant, kind)
    assert main(["--database-url", url, "jobs", "cancel", str(spared), "--dry-run"]) == 1
    one_with_dry_run = capsys.readouterr().err.splitlines()
    engine = sa.create_engine(database_url, poolclass=sa.NullPool)
    with engine.connect() as conn:
        spared_state = jobs.get(conn, spared).state
    engine.dispose()

    assert dry == [f"would cancel 2 job(s) {scope}"]
    assert refused == [f"refusing to cancel 2 job(s) {scope} without --yes"]
    assert still == [JobState.QUEUED] * 2
    assert (done["dry_run"], done["count"]) == (False, 2)
    assert {job["id"] for job in done["jobs"]} == {str(job_id) for job_id in ids}
    assert after == [JobState.CANCELLED] * 2
    assert nothing == [f"requeued 0 job(s) of kind {kind}"]
    assert neither == ["error: give a job id, or filters: --tenant, --kind, --state, --older-than"]
    assert one_with_dry_run == [
        "error: --dry-run and --yes go with filters; one job id is changed as it is"
    ]
    assert spared_state is JobState.QUEUED


def test_jobs_cancel_of_a_running_job_says_it_can_no_longer_complete(
    database_url: URL, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kind = f"test.cli.{uuid.uuid4().hex[:8]}"
    job_id = _enqueued(database_url, tenant, kind)
    engine = sa.create_engine(database_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        jobs.dequeue(conn, "cli-worker", kinds=[kind])
    engine.dispose()
    capsys.readouterr()

    assert main(["--database-url", _url(database_url), "jobs", "cancel", str(job_id)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"cancelled job {job_id}; its running attempt (worker cli-worker) can no longer complete"
    ]


def test_jobs_cancel_of_a_done_or_missing_job_is_one_line_and_exit_1(
    database_url: URL, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    kind = f"test.cli.{uuid.uuid4().hex[:8]}"
    job_id = _enqueued(database_url, tenant, kind)
    engine = sa.create_engine(database_url, poolclass=sa.NullPool)
    with engine.begin() as conn:
        (claimed,) = jobs.dequeue(conn, "cli-worker", kinds=[kind])
        jobs.complete(conn, claimed)
    engine.dispose()
    missing = uuid.uuid4()
    capsys.readouterr()

    assert main(["--database-url", url, "jobs", "cancel", str(job_id)]) == 1
    done = capsys.readouterr().err.splitlines()
    assert main(["--database-url", url, "jobs", "cancel", str(missing)]) == 1
    unknown = capsys.readouterr().err.splitlines()

    assert done == [f"error: job {job_id} is done: only unfinished jobs can be cancelled"]
    assert unknown == [f"error: job {missing} does not exist"]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            ["list", "--state", "finished"],
            "dms jobs list: error: argument --state: unknown state 'finished' "
            "(one of queued, running, done, dead, cancelled)",
        ),
        (
            ["list", "--state", "dead", "--limit", "0"],
            "dms jobs list: error: argument --limit: must be at least 1, not 0",
        ),
        (["cancel", "42"], "dms jobs cancel: error: argument job_id: invalid UUID value: '42'"),
    ],
)
def test_jobs_list_and_cancel_refuse_bad_arguments_in_one_line(
    database_url: URL, command: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--database-url", _url(database_url), "jobs", *command])

    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == message


def test_jobs_cancel_on_a_database_before_0005_says_migrate(
    empty_database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = sa.create_engine(empty_database_url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    migrations.upgrade(engine, "0004")
    provisioning.create_tenant(engine, "acme")
    job_id = _enqueued(empty_database_url, "acme", "test.cli.old")
    engine.dispose()
    capsys.readouterr()

    assert main(["--database-url", _url(empty_database_url), "jobs", "cancel", str(job_id)]) == 1
    assert capsys.readouterr().err.splitlines() == [NOT_MIGRATED]


def test_a_closed_pipe_ends_the_command_quietly(database_url: URL, tenant: str) -> None:
    _enqueued(database_url, tenant, f"test.cli.{uuid.uuid4().hex[:8]}")
    # As `dms jobs list | head -1` once head has exited: a pipe nobody reads any more.
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "dms", "--database-url", _url(database_url), "jobs", "list"],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)

    assert (result.returncode, result.stderr) == (EXIT_CLOSED_PIPE, "")
    assert EXIT_CLOSED_PIPE == 141


def test_dms_worker_sizes_its_pool_for_its_threads(database_url: URL) -> None:
    ctx = Context(settings=Settings.from_env(), database_url=_url(database_url))
    try:
        engine = worker_engine(ctx, 7)

        assert isinstance(engine.pool, QueuePool)
        assert engine.pool.size() == 7 + WORKER_EXTRA_CONNECTIONS == 13
        assert engine.pool._pre_ping  # where SQLAlchemy keeps pool_pre_ping
        with pytest.raises(RuntimeError):
            ctx.engine_with(pool_size=1)
    finally:
        ctx.close()


def _keys(value: object) -> set[str]:
    """Every key of every object in a JSON document."""
    if isinstance(value, dict):
        return set(value) | {key for item in value.values() for key in _keys(item)}
    if isinstance(value, list):
        return {key for item in value for key in _keys(item)}
    return set()


@pytest.mark.parametrize(
    "command",
    [
        ["tenants", "list"],
        ["status"],
        ["migrate"],
        ["jobs", "stats"],
        ["jobs", "list"],
        ["jobs", "dead"],
        ["users", "list"],
        ["folders", "list", "--tenant", "{tenant}"],
        ["folders", "tree", "--tenant", "{tenant}"],
        ["trash", "list", "--tenant", "{tenant}"],
        ["blobs", "gc", "--tenant", "{tenant}", "--dry-run", "--blobs", "/nonexistent/dms-blobs"],
        ["search", "config", "--tenant", "{tenant}"],
        ["search", "--tenant", "{tenant}", "words"],
        ["audit", "seal", "--tenant", "{tenant}"],
        ["audit", "verify", "--tenant", "{tenant}"],
        ["audit", "prune", "--tenant", "{tenant}", "--older-than", "1d", "--dry-run"],
    ],
    ids=" ".join,
)
def test_every_json_output_is_one_object_that_says_tenant(
    database_url: URL, module_tenant: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Each command reads the tenant, or seals and verifies its audit trail, and the test checks
    # the shape of what it prints, not what the tenant holds: the module's tenant will do.
    tenant = module_tenant
    _enqueued(database_url, tenant, f"test.cli.{uuid.uuid4().hex[:8]}")
    arguments = [word.replace("{tenant}", tenant) for word in command]
    capsys.readouterr()

    assert main(["--database-url", _url(database_url), *arguments, "--json"]) == 0
    out = capsys.readouterr().out

    assert out.count("\n") == 1
    document = json.loads(out)
    assert isinstance(document, dict)
    assert "slug" not in _keys(document)
    if "{tenant}" in command or command[0] == "tenants":
        assert tenant in json.dumps(document)


def _on_a_terminal(database_url: URL, answer: bytes, *command: str) -> tuple[int, str]:
    """Run ``dms`` with a terminal as stdin and stderr, answer its question; status, stderr."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "dms", "--database-url", _url(database_url), *command],
            stdin=terminal,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
        )
        os.close(terminal)
        seen = b""
        while b"Type yes to go on: " not in seen:
            chunk = _read(controller)
            assert chunk, f"no question asked; the command said {seen!r}"
            seen += chunk
        os.write(controller, answer + b"\n")
        status = process.wait(timeout=120)
        while chunk := _read(controller):
            seen += chunk
    finally:
        os.close(controller)
    return status, seen.decode().replace("\r\n", "\n")


def _read(descriptor: int) -> bytes:
    try:
        return os.read(descriptor, 4096)
    except OSError:  # EIO: the command closed the terminal's other end
        return b""


def test_a_destruction_asked_on_a_terminal_goes_on_only_after_yes(database_url: URL) -> None:
    slug = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(database_url, poolclass=sa.NullPool)
    provisioning.create_tenant(engine, slug)

    kept_status, kept_said = _on_a_terminal(database_url, b"no", "tenants", "drop", slug)
    registered_after_no = slug in {t.slug for t in tenancy.list_tenants(engine)}
    dropped_status, dropped_said = _on_a_terminal(database_url, b"yes", "tenants", "drop", slug)
    registered_after_yes = slug in {t.slug for t in tenancy.list_tenants(engine)}
    engine.dispose()

    question = f"Drop '{slug}' and all its data.\nType yes to go on: "
    assert kept_said.startswith(question)
    assert kept_said.endswith("nothing done: the answer was not yes\n")
    assert (kept_status, registered_after_no) == (1, True)
    assert dropped_said.startswith(question)
    assert (dropped_status, registered_after_yes) == (0, False)
