"""``dms worker --app module:attribute``: an application's handlers beside dms's own, and the
refusals that keep a worker from starting with handlers it does not have."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from dms import jobs
from dms.cli import main
from dms.cli.apps import load_apps
from dms.errors import ConfigurationError
from dms.jobs.tables import job_schedules
from dms.processing import VERIFY_REVISION
from dms.sealing import SEAL_AUDIT_TRAIL, SWEEP_AUDIT_TRAILS
from dms.services import EXTRACT_REVISION
from dms.storage import LocalBlobStore
from tests.jobs.app_example import (
    EVERY_MINUTE,
    GREET,
    STORED,
    TENANT_VARIABLE,
    greet,
    greeting,
)
from tests.jobs.conftest import wait_for

#: dms's own kinds, always loaded: verification, extraction, the audit trail's sealing.
BUILT_IN_KINDS = {VERIFY_REVISION, EXTRACT_REVISION, SWEEP_AUDIT_TRAILS, SEAL_AUDIT_TRAIL}


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def test_apps_add_their_handlers_to_dms_own(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)

    loaded = load_apps(
        ["tests.jobs.app_example:handlers", "tests.jobs.app_example:with_store"], store
    )

    assert set(loaded.handlers) == {*BUILT_IN_KINDS, GREET, STORED}
    assert loaded.handlers[GREET] is greet
    assert loaded.schedules == ()
    assert set(load_apps([], store).handlers) == BUILT_IN_KINDS
    assert set(load_apps(["dms.processing:handlers"], store).handlers) == BUILT_IN_KINDS


def test_an_app_brings_its_schedules(tmp_path: Path) -> None:
    loaded = load_apps(["tests.jobs.app_example:app"], LocalBlobStore(tmp_path))

    assert [schedule.name for schedule in loaded.schedules] == [EVERY_MINUTE]
    assert loaded.handlers[STORED] is greet


@pytest.mark.parametrize(
    ("app", "says"),
    [
        ("tests.jobs.app_example", "write it module:attribute"),
        (":handlers", "write it module:attribute"),
        ("tests.jobs.no_such_module:handlers", "cannot import tests.jobs.no_such_module"),
        ("tests.jobs.app_example:nothing_here", "tests.jobs.app_example has no nothing_here"),
        ("tests.jobs.app_example:not_an_app", "not a dms.jobs.App, a mapping of job kinds"),
        ("tests.jobs.app_example:greet", "calling it with the blob store failed"),
        ("tests.jobs.app_example:clashing", "'revision.verify' is handled by dms.processing"),
    ],
)
def test_an_app_that_cannot_be_loaded_is_named(app: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=f"--app {app}: .*{says}"):
        load_apps([app], LocalBlobStore(tmp_path))


def test_two_apps_with_a_schedule_of_one_name_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TENANT_VARIABLE, "acme")
    apps = ["tests.jobs.app_example:scheduled"]
    with pytest.raises(
        ConfigurationError,
        match=f"--app tests.jobs.app_example:app: schedule '{EVERY_MINUTE}' is defined by "
        "tests.jobs.app_example:scheduled already",
    ):
        load_apps([*apps, "tests.jobs.app_example:app"], LocalBlobStore(tmp_path))


def test_dms_worker_refuses_a_kind_it_has_no_handler_for(
    database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["--database-url", _url(database_url), "worker", "--kinds", "thumbnail.make"])

    assert status == 1
    assert capsys.readouterr().err == (
        "error: no handler for job kind(s) thumbnail.make "
        "(handlers: audit.seal, audit.sweep, revision.extract, revision.verify)\n"
    )


@pytest.mark.slow
def test_dms_worker_runs_an_apps_handlers(
    database_url: URL, engine: Engine, tenant: str, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        job_id = jobs.enqueue(conn, GREET, {}, tenant=tenant).job_id
    command = [sys.executable, "-m", "dms", "--database-url", _url(database_url), "worker"]
    app = ["--app", "tests.jobs.app_example:handlers", "--kinds", GREET, "--blobs", str(tmp_path)]
    worker = subprocess.Popen([*command, *app], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        state = _state_when_settled(engine, job_id)
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=60)

    assert state is jobs.JobState.DONE
    assert worker.returncode == 0, err


@pytest.mark.slow
def test_dms_worker_registers_and_ticks_an_apps_schedules(
    database_url: URL, engine: Engine, tenant: str, tmp_path: Path
) -> None:
    # Registered before with ticks due: the worker registers it again and keeps its place.
    with engine.begin() as conn:
        jobs.register_schedules(conn, [greeting(tenant)])
        conn.execute(
            sa.update(job_schedules)
            .where(job_schedules.c.name == EVERY_MINUTE)
            .values(next_run_at=job_schedules.c.next_run_at - timedelta(minutes=3))
        )
    command = [sys.executable, "-m", "dms", "--database-url", _url(database_url), "worker"]
    app = ["--app", "tests.jobs.app_example:scheduled", "--blobs", str(tmp_path)]
    environment = {**os.environ, TENANT_VARIABLE: tenant}
    worker = subprocess.Popen(
        [*command, *app], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
    )
    try:
        with engine.connect() as conn:
            wait_for(lambda: _done(conn, tenant) >= 2, timeout=60)
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=60)
        with engine.begin() as conn:
            jobs.remove_schedule(conn, EVERY_MINUTE)

    assert worker.returncode == 0, err


def _done(conn: Connection, tenant: str) -> int:
    stats = jobs.stats(conn, tenant=tenant, kind=GREET)
    return stats.total(jobs.JobState.DONE)


def _state_when_settled(engine: Engine, job_id: uuid.UUID) -> jobs.JobState:
    deadline = time.monotonic() + 60
    while True:
        with engine.connect() as conn:
            state = jobs.get(conn, job_id).state
        if (
            state not in (jobs.JobState.QUEUED, jobs.JobState.RUNNING)
            or time.monotonic() > deadline
        ):
            return state
        time.sleep(0.1)
