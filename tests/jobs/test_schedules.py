"""Periodic jobs (dms.jobs.schedules): each tick enqueued once, missed ticks caught up or skipped.

The database's clock decides what is due, so a test moves a schedule's ``next_run_at`` into the
past instead of waiting for ticks to come.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms import jobs, provisioning
from dms.errors import InvalidTenantName, NotFound, TenantNotFound, ValidationError
from dms.jobs.schedules import MAX_CATCH_UP, MAX_TICKS_PER_PASS, NEVER
from dms.jobs.tables import job_schedules, processing_jobs
from dms.jobs.worker import JobUnitOfWork
from tests.conftest import new_slug
from tests.jobs.conftest import wait_for

EVERY_MINUTE = "* * * * *"
ONE_MINUTE = timedelta(minutes=1)


def _schedule(tenant: str, kind: str, cron: str = EVERY_MINUTE, **fields: Any) -> jobs.Schedule:
    return jobs.Schedule(
        name=f"test-{uuid.uuid4().hex[:8]}", cron=cron, kind=kind, tenant=tenant, **fields
    )


def _now(conn: Connection) -> datetime:
    now: datetime = conn.execute(sa.select(sa.func.now())).scalar_one()
    return now


def _rewind(conn: Connection, name: str, by: timedelta) -> None:
    """Put the schedule's next tick ``by`` into the past, as if no worker had run since."""
    conn.execute(
        sa.update(job_schedules)
        .where(job_schedules.c.name == name)
        .values(next_run_at=job_schedules.c.next_run_at - by)
    )


def _register_due(engine: Engine, schedule: jobs.Schedule, by: timedelta) -> None:
    """Register ``schedule`` with its next tick ``by`` in the past: ticks are due at once."""
    with engine.begin() as conn:
        jobs.register_schedules(conn, [schedule])
        _rewind(conn, schedule.name, by)


def _ticks_enqueued(conn: Connection, kind: str) -> list[datetime]:
    return list(
        conn.scalars(
            sa.select(processing_jobs.c.run_at)
            .where(processing_jobs.c.kind == kind)
            .order_by(processing_jobs.c.run_at)
        )
    )


def _state(conn: Connection, name: str) -> jobs.ScheduleState:
    (state,) = [s for s in jobs.list_schedules(conn) if s.schedule.name == name]
    return state


def test_a_registered_schedule_waits_for_its_first_tick(
    engine: Engine, tenant: str, kind: str
) -> None:
    schedule = _schedule(tenant, kind, EVERY_MINUTE, payload={"report": "daily"}, priority=3)
    with engine.begin() as conn:
        jobs.register_schedules(conn, [schedule])
        now = _now(conn)
        state = _state(conn, schedule.name)
        ticked = jobs.tick_schedules(conn)
    assert state.schedule == schedule
    assert now < state.next_run_at <= now + timedelta(minutes=1)
    assert state.next_run_at.second == 0
    assert state.last_tick_at is None
    assert schedule.name not in {tick.name for tick in ticked}


def test_every_due_tick_is_enqueued_once_with_its_tick_as_run_at(
    engine: Engine, tenant: str, kind: str
) -> None:
    schedule = _schedule(
        tenant, kind, payload={"n": 1}, priority=5, max_attempts=2, catch_up=timedelta(hours=1)
    )
    _register_due(engine, schedule, timedelta(minutes=30))
    with engine.begin() as conn:
        (tick,) = [t for t in jobs.tick_schedules(conn) if t.name == schedule.name]
        again = [t for t in jobs.tick_schedules(conn) if t.name == schedule.name]
        runs = _ticks_enqueued(conn, kind)
        state = _state(conn, schedule.name)
        job = jobs.list_jobs(conn, kind=kind, limit=1)[0]
    assert again == []  # the same transaction already moved past them
    assert list(tick.ticks) == runs
    assert len(runs) >= 30
    assert all(b - a == ONE_MINUTE for a, b in itertools.pairwise(runs))
    assert state.last_tick_at == runs[-1]
    assert state.next_run_at == runs[-1] + ONE_MINUTE
    assert tick.skipped_until is None
    assert (job.payload, job.priority, job.max_attempts, job.tenant) == ({"n": 1}, 5, 2, tenant)


def test_concurrent_passes_enqueue_each_tick_exactly_once(
    engine: Engine, tenant: str, kind: str
) -> None:
    # Three passes' worth of ticks due: the passes of four threads race for them.
    schedule = _schedule(tenant, kind, catch_up=MAX_CATCH_UP)
    _register_due(engine, schedule, 3 * MAX_TICKS_PER_PASS * ONE_MINUTE)
    stop = threading.Event()
    errors: list[BaseException] = []

    def tick_for_a_while() -> None:
        try:
            while not stop.is_set():
                with engine.begin() as conn:
                    jobs.tick_schedules(conn)
        except BaseException as exc:  # reported by the test, never lost with the thread
            errors.append(exc)

    threads = [threading.Thread(target=tick_for_a_while) for _ in range(4)]
    for thread in threads:
        thread.start()
    with engine.connect() as conn:
        wait_for(lambda: len(_ticks_enqueued(conn, kind)) >= 3 * MAX_TICKS_PER_PASS, timeout=30)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    with engine.connect() as conn:
        runs = _ticks_enqueued(conn, kind)
    assert len(runs) == len(set(runs))
    assert all(b - a == ONE_MINUTE for a, b in itertools.pairwise(runs))


def test_ticks_older_than_the_catch_up_window_are_skipped_and_recorded(
    engine: Engine, tenant: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    schedule = _schedule(tenant, kind, EVERY_MINUTE, catch_up=timedelta(minutes=10))
    _register_due(engine, schedule, timedelta(hours=3))
    with caplog.at_level(logging.WARNING, logger="dms.jobs.schedules"), engine.begin() as conn:
        now = _now(conn)
        (tick,) = [t for t in jobs.tick_schedules(conn) if t.name == schedule.name]
        state = _state(conn, schedule.name)
    assert tick.skipped_until is not None
    # Every minute of the last ten, and none before.
    assert 10 <= len(tick.ticks) <= 11
    assert tick.ticks[0] >= now - timedelta(minutes=10)
    assert tick.skipped_until == tick.ticks[0] - timedelta(minutes=1)
    assert state.skipped_until == tick.skipped_until
    assert state.next_run_at > now
    assert f"schedule {schedule.name}: ticks until" in caplog.text


def test_no_catch_up_enqueues_only_what_is_due_now(engine: Engine, tenant: str, kind: str) -> None:
    schedule = _schedule(tenant, kind, EVERY_MINUTE, catch_up=timedelta(0))
    _register_due(engine, schedule, timedelta(minutes=30))
    with engine.begin() as conn:
        (tick,) = [t for t in jobs.tick_schedules(conn) if t.name == schedule.name]
    assert tick.ticks == ()
    assert tick.skipped_until is not None


def test_a_stored_schedule_of_six_fields_is_listed_never_ticked_and_the_others_tick(
    engine: Engine, tenant: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A row of six fields (registered when they were accepted, or written by hand) is not
    ticked as croniter reads it (its sixth field as seconds): it is kept, listed with no next
    run, and said at ERROR; the other schedules tick on."""
    stored = _schedule(tenant, f"{kind}.stored")
    live = _schedule(tenant, kind)
    with engine.begin() as conn:
        jobs.register_schedules(conn, [stored, live])
        _rewind(conn, live.name, 2 * ONE_MINUTE)
        conn.execute(
            sa.update(job_schedules)
            .where(job_schedules.c.name == stored.name)
            .values(cron="*/10 * * * * *", next_run_at=sa.func.now() - timedelta(minutes=1))
        )
    with caplog.at_level(logging.ERROR, logger="dms.jobs.schedules"), engine.begin() as conn:
        ticks = {tick.name: tick for tick in jobs.tick_schedules(conn)}
        state = _state(conn, stored.name)
        enqueued = _ticks_enqueued(conn, stored.kind)
    assert (ticks[stored.name].ticks, enqueued) == ((), [])
    assert state.schedule.cron == "*/10 * * * * *"
    assert state.next_run_at == NEVER
    assert f"schedule {stored.name}: cron '*/10 * * * * *' is not five fields" in caplog.text
    assert len(ticks[live.name].ticks) >= 2


def test_registering_again_keeps_the_place_unless_the_cron_changes(
    engine: Engine, tenant: str, kind: str
) -> None:
    schedule = _schedule(tenant, kind, EVERY_MINUTE)
    with engine.begin() as conn:
        jobs.register_schedules(conn, [schedule])
        _rewind(conn, schedule.name, timedelta(minutes=5))
        rewound = _state(conn, schedule.name).next_run_at
        changed = jobs.Schedule(**{**schedule.__dict__, "payload": {"v": 2}})
        jobs.register_schedules(conn, [changed])
        kept = _state(conn, schedule.name)
        hourly = jobs.Schedule(**{**schedule.__dict__, "cron": "0 * * * *"})
        jobs.register_schedules(conn, [hourly])
        moved = _state(conn, schedule.name)
        now = _now(conn)
    assert (kept.next_run_at, kept.schedule.payload) == (rewound, {"v": 2})
    assert moved.next_run_at > now
    assert moved.next_run_at.minute == 0
    assert moved.schedule.cron == "0 * * * *"


def test_a_schedule_in_a_time_zone_ticks_at_its_local_time() -> None:
    schedule = jobs.Schedule(
        name="berlin", cron="0 9 * * *", kind="k", tenant="acme", timezone="Europe/Berlin"
    )
    winter = datetime(2026, 1, 10, 12, tzinfo=timezone.utc)
    summer = datetime(2026, 7, 10, 12, tzinfo=timezone.utc)
    assert schedule.next_tick(winter) == datetime(2026, 1, 11, 8, tzinfo=timezone.utc)
    assert schedule.next_tick(summer) == datetime(2026, 7, 11, 7, tzinfo=timezone.utc)


def test_remove_deletes_the_schedule_and_keeps_its_jobs(
    engine: Engine, tenant: str, kind: str
) -> None:
    schedule = _schedule(tenant, kind)
    with engine.begin() as conn:
        jobs.register_schedules(conn, [schedule])
        _rewind(conn, schedule.name, 3 * ONE_MINUTE)
        jobs.tick_schedules(conn)
        jobs.remove_schedule(conn, schedule.name)
        names = {state.schedule.name for state in jobs.list_schedules(conn)}
        left = len(_ticks_enqueued(conn, kind))
        with pytest.raises(NotFound, match=schedule.name):
            jobs.remove_schedule(conn, schedule.name)
    assert schedule.name not in names
    assert left >= 3


def test_dropping_the_tenant_drops_its_schedules(engine: Engine, kind: str) -> None:
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    schedule = _schedule(slug, kind)
    with engine.begin() as conn:
        jobs.register_schedules(conn, [schedule])
    provisioning.drop_tenant(engine, slug)
    with engine.connect() as conn:
        assert schedule.name not in {s.schedule.name for s in jobs.list_schedules(conn)}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "61 * * * *"}, "cron must be a cron expression"),
        ({"cron": "* * *"}, r"five fields \(minute hour day month weekday\).*: 3 fields"),
        ({"cron": "*/10 * * * * *"}, r"five fields \(minute hour day month weekday\).*: 6 fields"),
        ({"cron": "0 0 1 1 * 0 2030"}, "five fields .*: 7 fields"),
        ({"cron": "0 0 31 2 *"}, "never fires"),
        ({"cron": ""}, "cron must be a non-blank string"),
        ({"cron": 5}, "cron must be a non-blank string"),
        ({"timezone": "Mars/Olympus"}, "timezone must be an IANA time zone"),
        ({"timezone": "../../etc/passwd"}, "timezone must be an IANA time zone"),
        ({"catch_up": timedelta(days=8)}, "catch_up must be a timedelta"),
        ({"catch_up": timedelta(seconds=-1)}, "catch_up must be a timedelta"),
        ({"name": " "}, "name must be a non-blank string"),
        ({"kind": "a\x00b"}, "kind"),
        ({"payload": {"x": float("nan")}}, "payload"),
        ({"tenant": "Not A Slug"}, "tenant"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_a_bad_schedule_is_refused_naming_its_field(
    fields: dict[str, object], message: str
) -> None:
    good: dict[str, object] = {"name": "n", "cron": EVERY_MINUTE, "kind": "k", "tenant": "acme"}
    with pytest.raises((ValidationError, InvalidTenantName), match=message):
        jobs.Schedule(**{**good, **fields})  # type: ignore[arg-type]


def _schedule_rows(conn: Connection) -> int:
    return conn.scalar(sa.select(sa.func.count()).select_from(job_schedules)) or 0


def test_registering_refuses_bad_batches_and_writes_nothing(
    engine: Engine, tenant: str, kind: str
) -> None:
    one = _schedule(tenant, kind)
    with engine.begin() as conn:
        before = _schedule_rows(conn)
        with pytest.raises(ValidationError, match="two schedules are named"):
            jobs.register_schedules(conn, [one, one])
        with pytest.raises(ValidationError, match="Schedule values only"):
            jobs.register_schedules(conn, [one, "daily"])  # type: ignore[list-item]
        with pytest.raises(ValidationError, match="a list of Schedule"):
            jobs.register_schedules(conn, "daily")  # type: ignore[arg-type]
        with pytest.raises(TenantNotFound, match="nosuchtenant"):
            jobs.register_schedules(conn, [one, _schedule("nosuchtenant", kind)])
        assert _schedule_rows(conn) == before


def _record(uow: JobUnitOfWork, job: jobs.Job) -> None:
    """Nothing to do: the test reads the job's state."""


def test_a_worker_registers_its_schedules_and_runs_their_ticks(
    engine: Engine, tenant: str, kind: str
) -> None:
    schedule = _schedule(tenant, kind)
    # Registered before with ticks due: the worker registers it again and keeps its place.
    _register_due(engine, schedule, 3 * ONE_MINUTE)
    worker = jobs.Worker(
        engine, {kind: _record}, jobs.WorkerConfig(schedules=[schedule], poll_seconds=0.2)
    )
    worker.start()
    try:
        with engine.connect() as conn:
            wait_for(lambda: jobs.stats(conn, kind=kind).total(jobs.JobState.DONE) >= 2, timeout=30)
    finally:
        worker.stop(grace_seconds=5)
    with engine.connect() as conn:
        state = _state(conn, schedule.name)
        runs = _ticks_enqueued(conn, kind)
    assert state.last_tick_at == runs[-1]
    assert len(runs) == len(set(runs))


def test_a_worker_refuses_bad_schedules_before_it_starts(engine: Engine, kind: str) -> None:
    with pytest.raises(ValidationError, match="Schedule values only"):
        jobs.Worker(engine, {kind: _record}, jobs.WorkerConfig(schedules=["* * * * *"]))  # type: ignore[list-item]
