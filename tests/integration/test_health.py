"""dms healthcheck and the queue's health figures and metrics, against a real server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from sqlalchemy.engine import URL, Engine

import dms
from dms import health, jobs, migrations, provisioning
from dms.cli import main
from dms.cli.health import metrics_module
from dms.errors import ConfigurationError, ValidationError
from dms.jobs.presence import LIVE_WITHIN, announce, live_workers
from dms.jobs.tables import job_workers, processing_jobs
from dms.metrics import registry_for
from dms.processing import VERIFY_REVISION
from dms.services import EXTRACT_REVISION, add_revision, create_document
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork
from dms.users import create_user, create_users_stand_in
from tests.jobs.conftest import wait_for


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@pytest.fixture
def kind() -> str:
    return f"test.health.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def own_db(empty_database_url: URL) -> Iterator[Engine]:
    """A database of this test's own at head, with the users stand-in and no jobs."""
    engine = sa.create_engine(empty_database_url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()


def test_a_healthy_database(own_db: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", _url(own_db.url), "healthcheck"]) == 0
    lines = capsys.readouterr().out.splitlines()

    head = migrations.head_revision()
    assert lines[:4] == [
        "ok    database  reachable",
        f"ok    schemas   shared schema and 0 tenant(s) at head {head}",
        "ok    queue     no runnable job waits",
        "ok    leases    every expired lease taken back within 60 s",
    ]
    assert lines[-1] == "healthy"


def test_an_unmigrated_database_is_unhealthy(
    empty_database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--database-url", _url(empty_database_url), "healthcheck"]) == 1
    lines = capsys.readouterr().out.splitlines()

    head = migrations.head_revision()
    assert lines == [
        "ok    database  reachable",
        f"FAIL  schemas   shared schema not at head {head}: run `dms migrate`",
        "unhealthy",
    ]


def test_an_unreachable_database_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    url = f"postgresql://nobody@127.0.0.1:{port}/none"

    assert main(["--database-url", url, "healthcheck"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: cannot use the database: ")


def test_a_tenant_behind_head_is_named(
    database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = sa.create_engine(database_url)
    slug = f"h{uuid.uuid4().hex[:10]}"
    provisioning.create_tenant(engine, slug)
    try:
        migrations.downgrade(engine, "-1", tenant=slug)
        checks = {c.name: c for c in health.check(engine)}
    finally:
        provisioning.drop_tenant(engine, slug)
        engine.dispose()

    assert not checks["schemas"].ok
    assert slug in checks["schemas"].detail


def test_an_old_runnable_job_and_an_untaken_expired_lease_fail(
    own_db: Engine, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    provisioning.create_tenant(own_db, "acme")
    with own_db.begin() as conn:
        old = datetime.now(timezone.utc) - timedelta(minutes=10)
        jobs.enqueue(conn, kind, {}, tenant="acme", run_at=old)
        stuck = jobs.enqueue(conn, kind, {}, tenant="acme", run_at=old).job_id
        conn.execute(
            sa.update(processing_jobs)
            .where(processing_jobs.c.id == stuck)
            .values(
                state="running",
                locked_by="a worker that died",
                attempts=1,
                lease_expires_at=sa.func.now() - timedelta(minutes=2),
            )
        )

    checks = {c.name: c for c in health.check(own_db)}
    assert main(["--database-url", _url(own_db.url), "healthcheck", "--json"]) == 1

    assert not checks["queue"].ok
    assert checks["queue"].detail.startswith("oldest runnable job waits 6")
    assert (checks["leases"].ok, checks["leases"].detail) == (
        False,
        "1 running job(s) with a lease expired over 60 s ago: no worker takes them back",
    )
    assert health.check(own_db, max_queue_age=timedelta(hours=1))[2].ok


def test_the_oldest_snapshot_holding_back_cleanup_is_reported(own_db: Engine) -> None:
    with own_db.connect() as holder:
        holder.execute(sa.text("BEGIN ISOLATION LEVEL REPEATABLE READ"))
        holder.execute(sa.select(1))  # takes the snapshot
        for _ in range(3):  # three transactions newer than that snapshot
            with own_db.begin() as conn:
                conn.execute(sa.select(sa.func.txid_current()))
        with own_db.connect() as conn:
            figures = health.queue_health(conn)
        holder.rollback()

    assert figures.cleanup_holder is not None
    assert figures.cleanup_holder.age_xids >= 3


def test_a_vacuum_is_seen(own_db: Engine) -> None:
    def vacuumed() -> bool:
        with own_db.connect() as conn:
            return health.queue_health(conn).last_vacuum is not None

    # A new database's queue was never vacuumed (too small for autovacuum): nothing to see yet.
    assert not vacuumed()
    with own_db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM dms.processing_jobs")

    wait_for(vacuumed, timeout=10)


def test_metrics_show_the_queue(own_db: Engine, kind: str) -> None:
    provisioning.create_tenant(own_db, "acme")
    with own_db.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant="acme")

    text = generate_latest(registry_for(own_db)).decode()

    assert "dms_up 1.0" in text
    assert f'dms_jobs{{kind="{kind}",state="queued"}} 1.0' in text
    assert "dms_jobs_expired_leases 0.0" in text
    assert 'dms_jobs_table_rows{kind="dead"}' in text


def test_health_and_metrics_count_cancelled_jobs(own_db: Engine, kind: str) -> None:
    provisioning.create_tenant(own_db, "acme")
    with own_db.begin() as conn:
        jobs.cancel(conn, jobs.enqueue(conn, kind, {}, tenant="acme").job_id)
        counts = health.queue_health(conn).counts

    text = generate_latest(registry_for(own_db)).decode()

    assert health.KindCount(kind=kind, state=jobs.JobState.CANCELLED, count=1) in counts
    assert f'dms_jobs{{kind="{kind}",state="cancelled"}} 1.0' in text


def test_metrics_of_an_unreachable_database_say_down() -> None:
    engine = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    text = generate_latest(registry_for(engine)).decode()

    assert "dms_up 0.0" in text
    assert "dms_jobs{" not in text


def test_without_the_prometheus_client_one_line_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What a missing prometheus_client looks like to the import of dms.metrics.
    monkeypatch.setitem(sys.modules, "dms.metrics", None)
    monkeypatch.delattr(dms, "metrics", raising=False)

    with pytest.raises(ConfigurationError, match=r"pip install 'dms\[metrics\]'"):
        metrics_module()


@pytest.mark.slow
@pytest.mark.parametrize("command", [["metrics", "--port"], ["worker", "--metrics-port"]])
def test_the_exporter_serves_until_sigterm(own_db: Engine, command: list[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "dms", "--database-url", _url(own_db.url), *command, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = _scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        process.terminate()
        _, err = process.communicate(timeout=60)

    assert "dms_up 1.0" in body
    assert process.returncode == 0, err
    # The worker's own counters too (issue 10), and only there.
    assert ('dms_worker_runners_alive{worker="' in body) is (command[0] == "worker")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "everywhere"),
    [
        (["metrics", "--port"], False),
        (["metrics", "--address", "0.0.0.0", "--port"], True),  # noqa: S104 -- told to
        (["worker", "--metrics-port"], False),
        (["worker", "--metrics-address", "0.0.0.0", "--metrics-port"], True),  # noqa: S104
    ],
)
def test_the_exporter_listens_on_loopback_unless_told_otherwise(
    own_db: Engine, command: list[str], everywhere: bool
) -> None:
    """Its figures name kinds, tenants' backlogs and the server's state: not for every network
    the host is on. 127.0.0.2 is this host too, but not the address 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "dms", "--database-url", _url(own_db.url), *command, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = _scrape(f"http://127.0.0.1:{port}/metrics")
        try:
            socket.create_connection(("127.0.0.2", port), timeout=5).close()
            elsewhere = True
        except ConnectionRefusedError:
            elsewhere = False
    finally:
        process.terminate()
        _, err = process.communicate(timeout=60)

    assert "dms_up 1.0" in body
    assert process.returncode == 0, err
    assert elsewhere is everywhere


@pytest.mark.parametrize(
    ("command", "option"), [("metrics", "--address"), ("worker", "--metrics-address")]
)
def test_the_help_says_where_the_exporter_listens(
    command: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())

    assert option in text
    assert "default 127.0.0.1" in text


def _scrape(url: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 -- localhost
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_queue_age": "5m"},
        {"max_queue_age": timedelta(seconds=-1)},
        {"max_expired_lease": None},
        {"max_expired_lease": timedelta(days=10**6)},
    ],
)
def test_health_limits_that_are_not_durations_are_refused_by_name(
    engine: Engine, limits: dict[str, object]
) -> None:
    # Refused before anything is read: the worker's database will do (a database of its own
    # costs a second to create and migrate, more on Citus).
    (name,) = limits
    with pytest.raises(ValidationError, match=f"^{name} must be a timedelta"):
        health.check(engine, **limits)  # type: ignore[arg-type]
    if name == "max_expired_lease":
        with engine.connect() as conn, pytest.raises(ValidationError, match=f"^{name} "):
            health.queue_health(conn, **limits)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", [["metrics", "--port"], ["worker", "--metrics-port"]])
def test_a_port_beyond_65535_is_a_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "65536"])

    assert exited.value.code == 2
    assert "must be at most 65535, not 65536" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["metrics", "--port"], ["worker", "--metrics-port"]])
def test_a_port_in_use_is_one_error_line(engine: Engine, command: list[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))  # where the exporter listens by default
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "dms", "--database-url", _url(engine.url), *command, str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert done.returncode == 1
    in_use = f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use\n"
    assert done.stderr == in_use


def test_an_address_that_does_not_resolve_is_refused(engine: Engine) -> None:
    metrics = metrics_module()

    with pytest.raises(ConfigurationError, match=r"cannot serve metrics on no-such-host\.invalid:"):
        metrics.serve(engine, 9187, address="no-such-host.invalid")


def test_a_store_that_holds_none_of_the_tenants_blobs_fails_the_check(
    own_db: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    provisioning.create_tenant(own_db, "acme")
    with own_db.begin() as conn:
        user_id = create_user(conn, email="a@example.com", display_name="A")
    right = LocalBlobStore(tmp_path / "right", durable=False)
    with UnitOfWork(own_db, tenant="acme", user_id=user_id) as uow:
        for n in range(3):
            stored = right.put(f"acme/{n}", b"bytes %d" % n)
            document = create_document(uow, title=f"{n}.txt")
            add_revision(
                uow,
                document.id,
                storage_key=stored.storage_key,
                sha256=stored.sha256,
                size_bytes=stored.size_bytes,
                mime_type="text/plain",
            )
        uow.commit()
    right.delete("acme/0")  # one missing file is its document's finding, not the store's
    with own_db.begin() as conn:  # the revisions' jobs are queued: a worker for them runs
        announce(conn, "a worker", [VERIFY_REVISION, EXTRACT_REVISION])
    command = ["--database-url", _url(own_db.url), "healthcheck", "--blobs"]

    assert main([*command, str(right.root)]) == 0
    healthy = capsys.readouterr().out.splitlines()
    assert main([*command, str(tmp_path / "wrong")]) == 1
    unhealthy = capsys.readouterr().out.splitlines()

    assert f"ok    blobs     {right.root} holds the sampled blobs of 1 tenant(s)" in healthy
    assert (
        f"FAIL  blobs     {tmp_path / 'wrong'} holds none of the sampled blobs of 1 of 1 "
        "tenant(s) (acme): is it the store their files were written to?"
    ) in unhealthy


def test_queued_jobs_of_a_kind_no_running_worker_handles_fail_the_handlers_check(
    own_db: Engine, kind: str
) -> None:
    provisioning.create_tenant(own_db, "acme")
    with own_db.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant="acme")
        jobs.enqueue(conn, kind, {}, tenant="acme")

    unhandled = {c.name: c for c in health.check(own_db)}["handlers"]
    text = generate_latest(registry_for(own_db)).decode()
    with own_db.begin() as conn:
        announce(conn, "elsewhere", [kind, "other.kind"])
    handled = {c.name: c for c in health.check(own_db)}["handlers"]
    text_handled = generate_latest(registry_for(own_db)).decode()
    with own_db.begin() as conn:
        # Killed without withdrawing: unseen for longer than a live worker ever is.
        conn.execute(sa.update(job_workers).values(seen_at=sa.func.now() - LIVE_WITHIN * 2))
    gone = {c.name: c for c in health.check(own_db)}["handlers"]

    assert (unhandled.ok, unhandled.detail) == (
        False,
        f"no running worker handles {kind} (2 queued)",
    )
    assert f'dms_jobs_unhandled{{kind="{kind}"}} 2.0' in text
    assert "dms_workers_live 0.0" in text
    assert (handled.ok, handled.detail) == (
        True,
        "every queued kind has a running worker (1 running)",
    )
    assert "dms_jobs_unhandled{" not in text_handled
    assert "dms_workers_live 1.0" in text_handled
    assert not gone.ok


def test_a_running_worker_is_live_with_its_kinds_until_it_stops(own_db: Engine, kind: str) -> None:
    worker = jobs.Worker(own_db, {kind: lambda uow, job: None}, jobs.WorkerConfig(name=f"w-{kind}"))
    worker.start()
    try:
        with own_db.connect() as conn:
            wait_for(lambda: any(w.name == worker.name for w in live_workers(conn)))
            (seen,) = [w for w in live_workers(conn) if w.name == worker.name]
    finally:
        worker.stop(grace_seconds=5)
    with own_db.connect() as conn:
        after = [w.name for w in live_workers(conn)]

    assert seen.kinds == (kind,)
    assert worker.name not in after
