"""The audit trail sealed by the workers (dms.sealing, docs/audit.md "Sealing by the workers")."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms import jobs, provisioning, tenancy
from dms.audit import seal_audit_trail, verify_audit_trail
from dms.config import Settings, with_settings
from dms.errors import InvalidTenantName, ValidationError
from dms.jobs import JobState, WorkerConfig
from dms.jobs.tables import job_schedules, processing_jobs
from dms.processing import handlers
from dms.repositories.audit import SEAL_BATCH
from dms.schema import tenant as t
from dms.sealing import (
    SEAL_AUDIT_TRAIL,
    SEAL_CRON,
    SEAL_SCHEDULE,
    SWEEP_AUDIT_TRAILS,
    check_seal_cron,
    enqueue_seals,
    keep_sealing_scheduled,
    seal_batch,
    seal_job,
    sweep_audit_trails,
    unsealed_tenants,
)
from dms.storage import LocalBlobStore
from dms.testing.factories import FolderFactory
from dms.uow import UnitOfWork
from dms.worker import DocumentWorker
from tests.conftest import new_slug
from tests.jobs.conftest import wait_for


def _write_events(engine: Engine, tenant: str, user_id: uuid.UUID, count: int = 3) -> None:
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        for _ in range(count):
            FolderFactory(conn=routed, created_by=user_id)


def _seal_jobs(conn: Connection, tenant: str, state: JobState = JobState.QUEUED) -> int:
    count = conn.execute(
        sa.select(sa.func.count())
        .select_from(processing_jobs)
        .where(
            processing_jobs.c.tenant == tenant,
            processing_jobs.c.kind == SEAL_AUDIT_TRAIL,
            processing_jobs.c.state == state.value,
        )
    ).scalar_one()
    return int(count)


def _sweep(engine: Engine, home: str) -> None:
    """Run one sweep the way a worker does, in ``home``'s unit of work."""
    with UnitOfWork(engine, tenant=home) as uow:
        sweep_audit_trails(uow, _job(engine, home))
        uow.commit()


def _job(engine: Engine, tenant: str) -> jobs.Job:
    """A job to hand a handler (its kind aside: the handlers read only its id)."""
    with engine.begin() as conn:
        enqueued = jobs.enqueue(conn, "tests.sealing", {}, tenant=tenant)
        return jobs.get(conn, enqueued.job_id)


def test_a_sweep_enqueues_a_seal_job_only_for_tenants_with_unsealed_events_and_only_once(
    engine: Engine, tenant: str, other_tenant: str, user_id: uuid.UUID
) -> None:
    _write_events(engine, tenant, user_id)
    _sweep(engine, other_tenant)
    _sweep(engine, other_tenant)  # a later tick while the first job still waits
    with engine.connect() as conn:
        assert _seal_jobs(conn, tenant) == 1
        assert _seal_jobs(conn, other_tenant) == 0
    seal_audit_trail(engine, tenant)
    _write_events(engine, tenant, user_id, count=1)
    _sweep(engine, other_tenant)  # new events after the seal: a new job
    with engine.connect() as conn:
        assert _seal_jobs(conn, tenant) == 2


def test_a_worker_with_dms_handlers_seals_every_tenant_by_itself(
    engine: Engine, tenant: str, other_tenant: str, user_id: uuid.UUID, tmp_path: Path
) -> None:
    _write_events(engine, tenant, user_id)
    _write_events(engine, other_tenant, user_id, count=1)
    # The default schedule (every minute), registered before with a tick due: the worker
    # finds it as it would have registered it and keeps its place.
    with engine.begin() as conn:
        keep_sealing_scheduled(conn, SEAL_CRON, replace=True)
        conn.execute(
            sa.update(job_schedules)
            .where(job_schedules.c.name == SEAL_SCHEDULE)
            .values(next_run_at=job_schedules.c.next_run_at - timedelta(minutes=1))
        )
    worker = DocumentWorker(
        with_settings(engine, Settings(audit_seal_cron=SEAL_CRON)),
        handlers(LocalBlobStore(tmp_path)),
        WorkerConfig(poll_seconds=0.2, listen=False),
    )
    worker.start()
    try:
        wait_for(
            lambda: all(
                verify_audit_trail(engine, slug, seal=False).unsealed == 0
                for slug in (tenant, other_tenant)
            ),
            timeout=30,
        )
    finally:
        worker.stop(grace_seconds=5)
    for slug in (tenant, other_tenant):
        report = verify_audit_trail(engine, slug, seal=False)
        assert report.intact
        assert report.head > 0
    with engine.connect() as conn:
        assert _seal_jobs(conn, tenant, JobState.DONE) >= 1
        assert SEAL_SCHEDULE in {state.schedule.name for state in jobs.list_schedules(conn)}


def test_a_full_batch_enqueues_the_next_and_a_sealed_trail_stays_intact(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with engine.begin() as conn:
        rows = FolderFactory.build_batch(SEAL_BATCH + 1, created_by=user_id)
        tenancy.route(conn, tenant).execute(sa.insert(t.folders), rows)
    with UnitOfWork(engine, tenant=tenant) as uow:
        seal_batch(uow, _job(engine, tenant))
        uow.commit()
    report = verify_audit_trail(engine, tenant, seal=False)
    assert (report.head, report.unsealed) == (SEAL_BATCH, 1)
    with engine.connect() as conn:
        assert _seal_jobs(conn, tenant) == 1


def test_a_tenant_dropped_between_tick_and_seal_leaves_no_job_behind(
    engine: Engine, tenant: str, user_id: uuid.UUID, tmp_path: Path
) -> None:
    doomed = new_slug()
    provisioning.create_tenant(engine, doomed)
    _write_events(engine, doomed, user_id)
    _write_events(engine, tenant, user_id)
    _sweep(engine, tenant)
    provisioning.drop_tenant(engine, doomed)
    off = with_settings(engine, Settings(audit_seal_cron="off"))
    worker = DocumentWorker(
        off, {SEAL_AUDIT_TRAIL: seal_batch}, WorkerConfig(poll_seconds=0.2, listen=False)
    )
    worker.start()
    try:
        wait_for(lambda: verify_audit_trail(engine, tenant, seal=False).unsealed == 0)
    finally:
        worker.stop(grace_seconds=5)
    stats = worker.stats()
    assert (stats.failed, stats.lost) == (0, 0)
    with engine.connect() as conn:
        assert _seal_jobs(conn, doomed, JobState.DEAD) == 0
        assert jobs.stats(conn, kind=SEAL_AUDIT_TRAIL).total(JobState.DEAD) == 0


def test_a_sweep_passes_over_tenants_dropped_while_it_runs_or_without_a_trail(
    engine: Engine, tenant: str, user_id: uuid.UUID, tenants: Callable[[int], list[str]]
) -> None:
    doomed = new_slug()
    provisioning.create_tenant(engine, doomed)
    _write_events(engine, doomed, user_id)
    _write_events(engine, tenant, user_id)
    due = unsealed_tenants(engine, [tenant, doomed])
    provisioning.drop_tenant(engine, doomed)
    assert sorted(due) == sorted([tenant, doomed])
    assert unsealed_tenants(engine, [doomed]) == {}  # probed after the drop: passed over
    assert unsealed_tenants(engine, tenants(1)) == {}  # registered, without a trail: passed over
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert enqueue_seals(uow, due) == 1  # enqueued after the drop: the others still are
        uow.commit()
    with engine.connect() as conn:
        assert _seal_jobs(conn, tenant) == 1


def test_sealing_by_a_job_and_by_dms_audit_seal_at_once_seals_each_event_once(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    _write_events(engine, tenant, user_id, count=5)
    job = _job(engine, tenant)
    sealed_by_operator: list[int] = []
    with UnitOfWork(engine, tenant=tenant) as uow:
        seal_batch(uow, job)  # holds the chain's head until it commits
        operator = threading.Thread(
            target=lambda: sealed_by_operator.append(seal_audit_trail(engine, tenant))
        )
        operator.start()
        operator.join(timeout=0.5)
        assert operator.is_alive()  # waits its turn on the head
        uow.commit()
    operator.join(timeout=10)
    assert sealed_by_operator == [0]
    report = verify_audit_trail(engine, tenant, seal=False)
    assert report.intact
    assert (report.head, report.unsealed) == (5, 0)


def test_the_schedule_is_filed_under_another_tenant_when_its_home_is_dropped(
    engine: Engine, tenant: str
) -> None:
    home = new_slug()
    provisioning.create_tenant(engine, home)
    with engine.begin() as conn:
        jobs.register_schedules(
            conn,
            [
                jobs.Schedule(
                    name=SEAL_SCHEDULE, cron="* * * * *", kind=SWEEP_AUDIT_TRAILS, tenant=home
                )
            ],
        )
    provisioning.drop_tenant(engine, home)
    with engine.begin() as conn:
        assert keep_sealing_scheduled(conn, "*/5 * * * *")
        assert not keep_sealing_scheduled(conn, "*/5 * * * *")  # there: left alone
        assert keep_sealing_scheduled(conn, "*/2 * * * *", replace=True)
        [state] = [s for s in jobs.list_schedules(conn) if s.schedule.name == SEAL_SCHEDULE]
        jobs.remove_schedule(conn, SEAL_SCHEDULE)
    assert state.schedule.cron == "*/2 * * * *"
    assert state.schedule.kind == SWEEP_AUDIT_TRAILS
    assert state.schedule.tenant in {t.slug for t in tenancy.list_tenants(engine)}


@pytest.mark.parametrize(
    "cron", ["", "every minute", "0 0 31 2 *", "*/10 * * * * *", "* * * * * * * *", "\x00"]
)
def test_a_bad_sealing_cron_is_refused_before_the_worker_starts(
    engine: Engine, cron: str, tmp_path: Path
) -> None:
    with pytest.raises(ValidationError, match="DMS_AUDIT_SEAL_CRON"):
        check_seal_cron(cron)
    bad = with_settings(engine, Settings(audit_seal_cron=cron))
    worker = DocumentWorker(bad, handlers(LocalBlobStore(tmp_path)), WorkerConfig(listen=False))
    with pytest.raises(ValidationError, match="DMS_AUDIT_SEAL_CRON"):
        worker.start()
    assert check_seal_cron("off") is None


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda engine: unsealed_tenants(engine, "acme"), ValidationError),
        (lambda engine: unsealed_tenants(engine, 7), ValidationError),  # type: ignore[arg-type]
        (lambda engine: unsealed_tenants(engine, ["ok", "Bad\x00"]), InvalidTenantName),
        (lambda engine: unsealed_tenants(engine, [None]), InvalidTenantName),  # type: ignore[list-item]
        (lambda engine: seal_job("pg_x", uuid.uuid4()), InvalidTenantName),
        (lambda engine: check_seal_cron(None), ValidationError),  # type: ignore[arg-type]
        (lambda engine: check_seal_cron("\udcff * * * *"), ValidationError),
    ],
)
def test_bad_arguments_are_refused_before_any_sql(
    engine: Engine, call: Callable[[Engine], object], error: type[Exception]
) -> None:
    statements: list[str] = []

    def record(conn: Connection, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        with pytest.raises(error):
            call(engine)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert statements == []
