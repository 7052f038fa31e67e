"""Interrupted fleet migrations: every tenant at the old revision or the new, never between.

Each test runs a real fleet migration in a subprocess (``dms migrate --jobs 2``, or plain
``alembic -x jobs=2``) over tenants one revision behind, makes it stall in the middle (the test
holds the migration locks of two tenants, one per worker, so the tenants before them are done
and the others are not started), interrupts it one way or another, and then checks: the exit
status and the one line that says how far it got and how to finish; every tenant's revision
and catalog fingerprint, equal to the old one or the new one; that the command it printed
finishes the rest. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from dms import migrations, provisioning, tenancy
from dms.migrations import Scripts
from dms.testing import temporary_database
from dms.users import create_users_stand_in
from tests.conftest import LONG_TEST_SECONDS
from tests.migrations.fingerprint import REPO_ROOT, Fingerprint, alembic_env, fingerprint, revisions
from tests.migrations.private_server import private_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.interruption,
    # Several waits of BOUND seconds each, and subprocesses: more than the default timeout.
    pytest.mark.timeout(LONG_TEST_SECONDS),
    pytest.mark.usefixtures("ctrl_c_as_in_a_terminal"),
]

HEAD = migrations.head_revision()
PREVIOUS = Scripts.default().chain()[-2]
SLUGS = tuple(f"i{index:02d}" for index in range(6))
#: The tenants whose migration locks the test holds: one per worker, so the run stalls with
#: SLUGS[:2] done and SLUGS[4:] not started.
HELD = SLUGS[2:4]
DONE_BEFORE = 2
#: Seconds any one wait in these tests may take.
BOUND = 60


def _lock_key(slug: str) -> sa.ColumnElement[int]:
    return sa.func.hashtextextended(sa.literal(f"dms.migrate:{tenancy.schema_name(slug)}"), 0)


def _waiting_migrations(conn: Connection) -> int:
    """Advisory locks waited for in this database (other tests use other databases)."""
    locks = sa.table("pg_locks", sa.column("locktype"), sa.column("granted"), sa.column("database"))
    databases = sa.table("pg_database", sa.column("oid"), sa.column("datname"))
    query = (
        sa.select(sa.func.count())
        .select_from(locks.join(databases, databases.c.oid == locks.c.database))
        .where(
            locks.c.locktype == "advisory",
            ~locks.c.granted,
            databases.c.datname == sa.func.current_database(),
        )
    )
    value = conn.scalar(query)
    conn.rollback()
    return int(value or 0)


def _fleet(url: URL) -> Engine:
    """Tenants SLUGS one revision behind head, each holding nothing but its schema."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenants(engine, SLUGS, jobs=1)
    migrations.downgrade(engine, PREVIOUS, jobs=1)
    return engine


@pytest.fixture
def fleet_url(server_url: URL) -> Iterator[URL]:
    """A database of this test's own with the fleet of :func:`_fleet`."""
    with temporary_database(server_url, prefix="dms_interrupt") as url:
        _fleet(url).dispose()
        yield url


def _shapes(server: URL) -> dict[str, Fingerprint]:
    """A tenant's catalog fingerprint at the previous revision and at head, on ``server``.

    Per server: PostgreSQL 18 renders some constraints unlike 15 (NOT NULL has rows of its own).
    """
    with temporary_database(server, prefix="dms_shapes") as url:
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        provisioning.create_tenant(engine, "shape")
        at_head = fingerprint(engine, "tenant_shape")
        migrations.downgrade(engine, PREVIOUS, tenant="shape")
        before = fingerprint(engine, "tenant_shape")
        engine.dispose()
    return {PREVIOUS: before, HEAD: at_head}


@pytest.fixture(scope="module")
def shapes(server_url: URL) -> dict[str, Fingerprint]:
    """:func:`_shapes` on the server under test."""
    return _shapes(server_url)


def _start(url: URL, argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        env=alembic_env(url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def _dms_migrate() -> list[str]:
    return [sys.executable, "-m", "dms", "migrate", "--revision", HEAD, "--jobs", "2"]


def _stall(holder: Connection, run: subprocess.Popen[str]) -> None:
    """Wait until both workers wait on the held locks: the run is stalled mid-fleet."""
    deadline = time.monotonic() + BOUND
    while _waiting_migrations(holder) < len(HELD):
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the run never reached the held tenants"
        time.sleep(0.05)


def _hold(engine: Engine) -> Connection:
    holder = engine.connect()
    for slug in HELD:
        holder.execute(sa.select(sa.func.pg_advisory_lock(_lock_key(slug))))
    holder.commit()
    return holder


def _release(holder: Connection) -> None:
    holder.execute(sa.select(sa.func.pg_advisory_unlock_all()))
    holder.commit()
    holder.close()


def _assert_each_old_or_new(url: URL, shapes: dict[str, Fingerprint]) -> dict[str, str | None]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        schemas = [tenancy.schema_name(slug) for slug in SLUGS]
        found = revisions(engine, *schemas)
        for schema in schemas:
            assert found[schema] in (PREVIOUS, HEAD), (schema, found[schema])
            assert fingerprint(engine, schema) == shapes[str(found[schema])], schema
    finally:
        engine.dispose()
    return found


def _assert_stopped_after_the_first(found: dict[str, str | None]) -> None:
    expected = {
        tenancy.schema_name(slug): HEAD if index < DONE_BEFORE else PREVIOUS
        for index, slug in enumerate(SLUGS)
    }
    assert found == expected


def _finish(url: URL, line: str) -> None:
    """Run the command that the interrupted run printed; it must finish the fleet."""
    command = line.split("; finish with: ", 1)[1]
    program, *arguments = command.split()
    module = "dms" if program == "dms" else "alembic"
    done = subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=REPO_ROOT,
        env=alembic_env(url),
        capture_output=True,
        text=True,
        timeout=BOUND * 2,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        assert migrations.fleet_status(engine).healthy
    finally:
        engine.dispose()


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def _stopped_line(why: str, command: str) -> str:
    left = len(SLUGS) - DONE_BEFORE
    return (
        f"{why}: {DONE_BEFORE} of {len(SLUGS)} tenant(s) at {HEAD}, {left} left as they were; "
        f"finish with: {command}"
    )


def test_ctrl_c_stops_cancels_in_flight_and_says_how_to_finish(
    fleet_url: URL, shapes: dict[str, Fingerprint]
) -> None:
    engine = sa.create_engine(fleet_url, poolclass=sa.NullPool)
    holder = _hold(engine)
    run = _start(fleet_url, _dms_migrate())
    _stall(holder, run)

    os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole group
    _, stderr = run.communicate(timeout=BOUND)
    _release(holder)
    engine.dispose()

    assert run.returncode == 130, stderr
    assert _last_line(stderr) == _stopped_line(
        "interrupted", f"dms migrate --revision {HEAD} --jobs 2"
    )
    assert "Traceback" not in stderr
    _assert_stopped_after_the_first(_assert_each_old_or_new(fleet_url, shapes))
    _finish(fleet_url, _last_line(stderr))


def test_sigterm_to_plain_alembic_stops_it_the_same_way(
    fleet_url: URL, shapes: dict[str, Fingerprint]
) -> None:
    engine = sa.create_engine(fleet_url, poolclass=sa.NullPool)
    holder = _hold(engine)
    ini = str(REPO_ROOT / "alembic.ini")
    alembic = [sys.executable, "-m", "alembic", "-c", ini, "-x", "jobs=2", "upgrade", "head"]
    run = _start(fleet_url, alembic)
    _stall(holder, run)

    os.kill(run.pid, signal.SIGTERM)  # a service manager stopping the main process
    _, stderr = run.communicate(timeout=BOUND)
    _release(holder)
    engine.dispose()

    assert run.returncode == 143, stderr
    assert _last_line(stderr) == _stopped_line(
        "interrupted", f"alembic -c {ini} -x jobs=2 upgrade {HEAD}"
    )
    _assert_stopped_after_the_first(_assert_each_old_or_new(fleet_url, shapes))
    _finish(fleet_url, _last_line(stderr))


def _fleet_sessions(conn: Connection, parent: int) -> int:
    activity = sa.table("pg_stat_activity", sa.column("application_name"))
    query = sa.select(sa.func.count()).where(activity.c.application_name == f"dms fleet {parent}")
    return int(conn.scalar(query) or 0)


def test_killed_run_leaves_no_worker_and_no_half_migrated_tenant(
    fleet_url: URL, shapes: dict[str, Fingerprint]
) -> None:
    engine = sa.create_engine(fleet_url, poolclass=sa.NullPool)
    holder = _hold(engine)
    run = _start(fleet_url, _dms_migrate())
    _stall(holder, run)

    os.kill(run.pid, signal.SIGKILL)  # nothing of the parent runs any more
    run.communicate(timeout=BOUND)
    _release(holder)  # the workers' sessions may now get their locks: they must not commit
    deadline = time.monotonic() + BOUND
    with engine.connect() as conn:
        while _fleet_sessions(conn, run.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
            conn.rollback()
        left = _fleet_sessions(conn, run.pid)
    engine.dispose()

    assert run.returncode == -signal.SIGKILL
    assert left == 0, "the workers of a killed run are still connected"
    _assert_stopped_after_the_first(_assert_each_old_or_new(fleet_url, shapes))
    _finish(fleet_url, f"; finish with: dms migrate --revision {HEAD} --jobs 2")


def _workers_of(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [
        int(pid) for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


def test_a_killed_worker_stops_the_run_with_the_command_that_finishes_it(
    fleet_url: URL, shapes: dict[str, Fingerprint]
) -> None:
    engine = sa.create_engine(fleet_url, poolclass=sa.NullPool)
    holder = _hold(engine)
    run = _start(fleet_url, _dms_migrate())
    _stall(holder, run)

    os.kill(_workers_of(run.pid)[0], signal.SIGKILL)
    _, stderr = run.communicate(timeout=BOUND)
    _release(holder)
    engine.dispose()

    assert run.returncode == 1, stderr
    assert _last_line(stderr) == _stopped_line(
        "error: a worker process died", f"dms migrate --revision {HEAD} --jobs 2"
    )
    _assert_stopped_after_the_first(_assert_each_old_or_new(fleet_url, shapes))
    _finish(fleet_url, _last_line(stderr))


def test_server_restart_mid_run_stops_it_and_the_rerun_finishes() -> None:
    with private_server() as server:
        shapes = _shapes(server.url)
        engine = sa.create_engine(server.url, poolclass=sa.NullPool)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                sa.text("CREATE DATABASE fleet")
            )
        engine.dispose()
        url = server.url.set(database="fleet")
        engine = _fleet(url)
        holder = _hold(engine)
        run = _start(url, _dms_migrate())
        _stall(holder, run)

        server.restart()  # terminates every session, the holder's and the workers'
        _, stderr = run.communicate(timeout=BOUND)
        holder.invalidate()
        engine.dispose()

        assert run.returncode == 1, stderr
        assert _last_line(stderr) == _stopped_line(
            "error: lost the connection to the database", f"dms migrate --revision {HEAD} --jobs 2"
        )
        _assert_stopped_after_the_first(_assert_each_old_or_new(url, shapes))
        _finish(url, _last_line(stderr))
