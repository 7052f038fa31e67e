"""Enqueue: transactional, idempotent (also when racing and after the job finished), validated."""

from __future__ import annotations

import dataclasses
import inspect
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine

from dms import jobs, provisioning
from dms.errors import InvalidTenantName, NotFound, TenantNotFound, ValidationError
from dms.jobs import validation
from dms.jobs._statements import NOTIFY_CHANNEL
from dms.jobs.enqueue import DEFAULT_MAX_ATTEMPTS
from dms.jobs.tables import job_idempotency_keys, processing_jobs
from dms.schema.shared import tenants
from dms.uow import UnitOfWork
from tests.conftest import new_slug
from tests.jobs.conftest import count_jobs, frontend_messages, wait_for


@pytest.fixture
def tenant(module_tenant: str) -> str:
    """Every test here puts only jobs of its own kind in its tenant, and filters every assertion
    by it: they share the module's (a tenant costs a fifth of a second here, seconds on Citus)."""
    return module_tenant


def test_enqueue_returns_a_queued_job(engine: Engine, tenant: str, kind: str) -> None:
    with engine.begin() as conn:
        job_id, created = jobs.enqueue(conn, kind, {"n": 1}, tenant=tenant, priority=-3)
        job = jobs.get(conn, job_id)
    assert created
    assert job.state is jobs.JobState.QUEUED
    assert (job.tenant, job.kind, job.payload, job.priority) == (tenant, kind, {"n": 1}, -3)
    assert (job.attempts, job.max_attempts) == (0, DEFAULT_MAX_ATTEMPTS)
    assert job.errors == ()


def test_enqueue_through_a_unit_of_work_rolls_back_with_it(
    engine: Engine, tenant: str, kind: str
) -> None:
    with UnitOfWork(engine, tenant=tenant) as uow:
        jobs.enqueue(uow, kind, {}, tenant=tenant)  # never committed
    with UnitOfWork(engine, tenant=tenant) as uow:
        kept, _ = jobs.enqueue(uow, kind, {}, tenant=tenant)
        uow.commit()
    with engine.connect() as conn:
        assert count_jobs(conn, kind) == 1
        assert jobs.get(conn, kept).kind == kind


def test_second_enqueue_with_a_key_returns_the_original(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        first = jobs.enqueue(conn, kind, {"v": 1}, tenant=tenant, idempotency_key="doc-1")
    with engine.begin() as conn:
        second = jobs.enqueue(conn, kind, {"v": 2}, tenant=tenant, idempotency_key="doc-1")
        other = jobs.enqueue(conn, kind, {"v": 3}, tenant=tenant, idempotency_key="doc-2")
        assert jobs.get(conn, first.job_id).payload == {"v": 1}
        assert count_jobs(conn, kind) == 2
    assert first.created
    assert other.created
    assert second == jobs.Enqueued(first.job_id, created=False)


def _race(engine: Engine, tenant: str, kind: str, threads: int) -> list[jobs.Enqueued]:
    """Every thread opens its transaction, waits for all the others, then enqueues."""
    barrier = threading.Barrier(threads)
    results: list[jobs.Enqueued] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueue() -> None:
        try:
            with engine.begin() as conn:
                conn.execute(sa.select(1))
                barrier.wait(timeout=30)
                result = jobs.enqueue(conn, kind, {}, tenant=tenant, idempotency_key="same")
            with lock:
                results.append(result)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=enqueue) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=60)
    assert not errors
    return results


def test_sixteen_threads_racing_on_one_key_make_one_job(
    fresh_engine: Any, tenant: str, kind: str
) -> None:
    engine: Engine = fresh_engine(poolclass=sa.NullPool)
    results = _race(engine, tenant, kind, 16)
    assert len(results) == 16
    assert len({r.job_id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    with engine.connect() as conn:
        assert count_jobs(conn, kind) == 1
    # Again once the job has finished: the ledger, not the job row, remembers the key.
    job_id = results[0].job_id
    with engine.begin() as conn:
        (claimed,) = jobs.dequeue(conn, "w", kinds=[kind])
        jobs.complete(conn, claimed)
    again = _race(engine, tenant, kind, 16)
    assert {r.job_id for r in again} == {job_id}
    assert not any(r.created for r in again)
    with engine.connect() as conn:
        assert count_jobs(conn, kind) == 1


def test_key_outlives_the_pruned_job_until_its_retention(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        job_id, _ = jobs.enqueue(conn, kind, {}, tenant=tenant, idempotency_key="k")
        (claimed,) = jobs.dequeue(conn, "w", kinds=[kind])
        jobs.complete(conn, claimed)
        conn.execute(
            sa.update(processing_jobs)
            .where(processing_jobs.c.id == job_id)
            .values(finished_at=sa.func.now() - timedelta(days=30))
        )
        assert jobs.prune(conn, older_than=timedelta(days=1)).jobs >= 1
        assert jobs.enqueue(conn, kind, {}, tenant=tenant, idempotency_key="k") == (job_id, False)
        # Once the key expires, prune forgets it and the key can be used again.
        conn.execute(
            sa.update(job_idempotency_keys)
            .where(job_idempotency_keys.c.job_id == job_id)
            .values(expires_at=sa.func.now() - timedelta(seconds=1))
        )
        assert jobs.prune(conn).idempotency_keys >= 1
        new_id, created = jobs.enqueue(conn, kind, {}, tenant=tenant, idempotency_key="k")
    assert created
    assert new_id != job_id


def test_enqueue_many_inserts_in_one_statement(engine: Engine, tenant: str, kind: str) -> None:
    with engine.begin() as conn:
        existing, _ = jobs.enqueue(conn, kind, {}, tenant=tenant, idempotency_key="old")
    batch = [
        jobs.NewJob(kind=kind, payload={"i": i}, tenant=tenant, idempotency_key=key)
        for i, key in enumerate(["a", None, "old", "a", None, "b"])
    ]
    inserts: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "INSERT" in statement:
            inserts.append(statement)

    with engine.begin() as conn:
        sa.event.listen(conn, "before_cursor_execute", record)
        results = jobs.enqueue_many(conn, batch)
        sa.event.remove(conn, "before_cursor_execute", record)
        assert count_jobs(conn, kind) == 5
    assert len(inserts) == 1
    assert [r.created for r in results] == [True, True, False, False, True, True]
    assert results[2].job_id == existing
    assert results[3].job_id == results[0].job_id
    assert len({r.job_id for r in results}) == 5


def test_run_at_and_backoff_are_stored(engine: Engine, tenant: str, kind: str) -> None:
    later = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    policy = jobs.Backoff(initial_seconds=1, step_seconds=2, maximum_seconds=3)
    with engine.begin() as conn:
        job_id, _ = jobs.enqueue(conn, kind, [], tenant=tenant, run_at=later, backoff=policy)
        job = jobs.get(conn, job_id)
        assert jobs.dequeue(conn, "w", kinds=[kind]) == []  # not before run_at
    assert job.run_at == later
    assert job.backoff == policy


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"payload": {"when": object()}}, ValidationError),
        ({"payload": {"x": float("nan")}}, ValidationError),
        ({"payload": "nul \x00 byte"}, ValidationError),
        ({"tenant": "nobody_here"}, TenantNotFound),
        ({"tenant": "Not A Slug"}, InvalidTenantName),
        ({"max_attempts": -1}, ValidationError),
        ({"max_attempts": 0}, ValidationError),
        ({"kind": ""}, ValidationError),
        ({"kind": "   "}, ValidationError),
        ({"priority": 2**40}, ValidationError),
        ({"idempotency_key": ""}, ValidationError),
        ({"run_at": datetime(2030, 1, 1)}, ValidationError),  # naive on purpose
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    engine: Engine, tenant: str, kind: str, arguments: dict[str, Any], error: type[Exception]
) -> None:
    values: dict[str, Any] = {"kind": kind, "payload": {}, "tenant": tenant, **arguments}
    with engine.begin() as conn:
        with pytest.raises(error):
            jobs.enqueue(conn, values.pop("kind"), values.pop("payload"), **values)
        assert count_jobs(conn, kind) == 0
        assert count_jobs(conn, arguments.get("kind", kind)) == 0
        keys = conn.scalar(sa.select(sa.func.count()).where(job_idempotency_keys.c.kind == kind))
        assert keys == 0


def test_one_bad_job_refuses_the_whole_batch(engine: Engine, tenant: str, kind: str) -> None:
    with engine.begin() as conn:
        good = jobs.NewJob(kind=kind, payload={}, tenant=tenant)
        with pytest.raises(TenantNotFound):
            jobs.enqueue_many(conn, [good, jobs.NewJob(kind=kind, payload={}, tenant="ghost")])
        assert count_jobs(conn, kind) == 0


def test_stats_count_by_tenant_kind_and_state(engine: Engine, tenant: str, kind: str) -> None:
    with engine.begin() as conn:
        for _ in range(3):
            jobs.enqueue(conn, kind, {}, tenant=tenant, max_attempts=1)
        (claimed,) = jobs.dequeue(conn, "w", kinds=[kind])
        jobs.fail(conn, claimed, "broken")
        stats = jobs.stats(conn, kind=kind)
    assert {(c.tenant, c.kind, c.state, c.count) for c in stats.counts} == {
        (tenant, kind, jobs.JobState.QUEUED, 2),
        (tenant, kind, jobs.JobState.DEAD, 1),
    }
    assert stats.dead == 1
    assert stats.total() == 3
    assert stats.oldest_queued_age is not None
    assert stats.oldest_queued_age >= timedelta(0)


def test_get_of_an_unknown_job_raises_not_found(engine: Engine) -> None:
    with engine.connect() as conn, pytest.raises(NotFound):
        jobs.get(conn, uuid.uuid4())


def test_a_keyed_batch_with_an_unknown_tenant_writes_nothing(
    engine: Engine, tenant: str, kind: str
) -> None:
    batch = [
        jobs.NewJob(kind=kind, payload={}, tenant=tenant, idempotency_key="mine"),
        jobs.NewJob(kind=kind, payload={}, tenant="ghost", idempotency_key="theirs"),
    ]
    with engine.begin() as conn:
        with pytest.raises(TenantNotFound, match="ghost"):
            jobs.enqueue_many(conn, batch)
        # The transaction is still usable, and holds neither a job nor a key of the batch.
        assert count_jobs(conn, kind) == 0
        keys = conn.scalar(sa.select(sa.func.count()).where(job_idempotency_keys.c.kind == kind))
        assert keys == 0


def _watched(conn: sa.Connection, watched: bool) -> list[str]:
    """The statements SQLAlchemy runs on ``conn`` from now on, if ``watched``.

    A listener makes the queue run its statements through SQLAlchemy (so that tracing sees
    them); without one, enqueue runs them on the driver connection (dms.jobs._driver).
    """
    statements: list[str] = []
    if watched:

        def record(conn: object, cursor: object, statement: str, *args: object) -> None:
            statements.append(statement)

        sa.event.listen(conn, "before_cursor_execute", record)
    return statements


@pytest.mark.parametrize("watched", [False, True])
def test_direct_and_sqlalchemy_execution_enqueue_alike(
    engine: Engine, tenant: str, kind: str, watched: bool
) -> None:
    with engine.begin() as conn:
        existing, _ = jobs.enqueue(conn, kind, {}, tenant=tenant, idempotency_key="old")
    later = datetime(2030, 1, 2, tzinfo=timezone.utc)
    batch = [
        jobs.NewJob(kind=kind, payload={"i": i, "l": [i]}, tenant=tenant, idempotency_key=key)
        for i, key in enumerate(["a", None, "old", "a", None])
    ] + [jobs.NewJob(kind=kind, payload="é", tenant=tenant, run_at=later, priority=-2)]
    # Not begun: the enqueue begins the transaction as conn.execute would, commit() commits it.
    with engine.connect() as conn:
        statements = _watched(conn, watched)
        results = jobs.enqueue_many(conn, batch)
        conn.commit()
    # Watched, SQLAlchemy ran the insert (then the reads of the keys that were taken).
    assert ("jsonb_to_recordset" in statements[0]) if watched else statements == []
    assert [r.created for r in results] == [True, True, False, False, True, True]
    assert results[2].job_id == existing
    assert results[3].job_id == results[0].job_id
    with engine.connect() as conn:
        assert count_jobs(conn, kind) == 5
        last = jobs.get(conn, results[5].job_id)
        assert (last.payload, last.run_at, last.priority) == ("é", later, -2)
        assert jobs.get(conn, results[0].job_id).payload == {"i": 0, "l": [0]}
    # And rolled back, nothing stays.
    with engine.connect() as conn:
        _watched(conn, watched)
        jobs.enqueue_many(conn, [jobs.NewJob(kind=kind, payload={}, tenant=tenant)])
        conn.rollback()
        assert count_jobs(conn, kind) == 5


def test_an_enqueue_on_an_autocommit_connection_is_one_round_trip(
    engine: Engine, tenant: str, kind: str
) -> None:
    batch = [jobs.NewJob(kind=kind, payload={"i": i}, tenant=tenant) for i in range(3)]
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        sent = frontend_messages(conn, lambda: jobs.enqueue_many(conn, batch))
    assert sent.count("Execute") == 1
    assert sent.count("Sync") == 1
    with engine.connect() as conn:
        assert count_jobs(conn, kind) == 3


@pytest.mark.parametrize("watched", [False, True])
def test_the_wake_up_is_delivered_when_the_enqueue_commits(
    engine: Engine, database_url: sa.URL, tenant: str, kind: str, watched: bool
) -> None:
    dsn = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
        with engine.connect() as conn:
            _watched(conn, watched)
            jobs.enqueue(conn, kind, {}, tenant=tenant)
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []  # not before commit
            conn.commit()
        woken = list(listener.notifies(timeout=10, stop_after=1))
    assert [n.channel for n in woken] == [NOTIFY_CHANNEL]


def test_the_payload_enqueued_is_the_one_validated(engine: Engine, tenant: str, kind: str) -> None:
    payload: dict[str, Any] = {"n": 1}
    job = jobs.NewJob(kind=kind, payload=payload, tenant=tenant)
    payload["n"] = float("nan")  # changed after validation: not what is sent
    with engine.begin() as conn:
        (result,) = jobs.enqueue_many(conn, [job])
        assert jobs.get(conn, result.job_id).payload == {"n": 1}


class _Lying(int):
    """An int that prints as JSON that would close its field and set the tenant."""

    def __repr__(self) -> str:
        return '0,"tenant":"other"'

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)


def test_values_cannot_write_other_fields_of_the_batch(
    engine: Engine, tenant: str, kind: str
) -> None:
    odd_kind = kind + '","tenant":"other'
    with engine.begin() as conn:
        (result,) = jobs.enqueue_many(
            conn,
            [jobs.NewJob(kind=odd_kind, payload={}, tenant=tenant, priority=_Lying(7))],
        )
        job = jobs.get(conn, result.job_id)
    assert (job.tenant, job.kind, job.priority) == (tenant, odd_kind, 7)


def test_new_job_takes_its_fields_as_keywords_with_their_defaults() -> None:
    # NewJob's __init__ is written by hand (speed): it must stay the one @dataclass would make.
    parameters = inspect.signature(jobs.NewJob).parameters
    fields = [f for f in dataclasses.fields(jobs.NewJob) if f.init]
    assert list(parameters) == [f.name for f in fields]
    for f in fields:
        assert parameters[f.name].kind is inspect.Parameter.KEYWORD_ONLY
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert parameters[f.name].default == default
    job = jobs.NewJob(kind="k", payload={"a": [1]}, tenant="acme", priority=3)
    moved = dataclasses.replace(job, priority=4)
    assert moved == jobs.NewJob(kind="k", payload={"a": [1]}, tenant="acme", priority=4)
    assert moved._fields_json != job._fields_json  # written anew, with the new priority
    assert repr(job).startswith("NewJob(kind='k', payload={'a': [1]}, tenant='acme'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.kind = "other"  # type: ignore[misc]


class _Sly(str):
    """A str that claims to equal (and hash as) any valid name it is looked up among."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("acme")


def test_names_found_valid_before_are_not_taken_for_lookalikes() -> None:
    jobs.NewJob(kind="acme", payload={}, tenant="acme")  # both remembered as valid
    with pytest.raises(ValidationError):
        jobs.NewJob(kind=_Sly("nul \x00"), payload={}, tenant="acme")
    with pytest.raises(InvalidTenantName):
        jobs.NewJob(kind="acme", payload={}, tenant=_Sly("Not A Slug"))


@pytest.mark.parametrize(
    "payload",
    [{}, {"n": 1}, {"é": ["\u2028", 1.5, None, True, {"x": []}]}, [1, "a"], "s", 3, 2.5, 10**30],
)
def test_strict_json_writes_what_the_encoder_writes(payload: Any) -> None:
    assert validation.strict_json(payload) == validation._STRICT_JSON.encode(payload)


@pytest.mark.parametrize(
    "payload", [{"x": float("nan")}, {1: {2}}, {"b": b"x"}], ids=["nan", "set", "bytes"]
)
def test_strict_json_refuses_what_the_encoder_refuses(payload: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        validation._STRICT_JSON.encode(payload)
    with pytest.raises(expected.type, match=str(expected.value)):
        validation.strict_json(payload)


def test_strict_json_refuses_a_circular_payload() -> None:
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        validation.strict_json(circular)


def test_a_tenant_dropped_during_the_insert_is_tenant_not_found(engine: Engine, kind: str) -> None:
    # The statement's own check reads the tenant (the drop is not committed yet); the foreign
    # key's check then waits for the drop's lock and finds the tenant gone.
    doomed = new_slug()
    provisioning.create_tenant(engine, doomed)
    outcome: list[BaseException] = []

    def enqueue() -> None:
        try:
            with engine.begin() as conn:
                jobs.enqueue(conn, kind, {}, tenant=doomed)
        except BaseException as exc:  # any outcome, for the test's thread to check
            outcome.append(exc)

    with engine.connect() as dropping:
        dropping.execute(sa.delete(tenants).where(tenants.c.slug == doomed))
        dropper = dropping.scalar(sa.select(sa.func.pg_backend_pid()))
        enqueuing = threading.Thread(target=enqueue)
        enqueuing.start()
        wait_for(lambda: _blocked_by(engine, dropper))
        dropping.commit()
    enqueuing.join(timeout=30)
    assert [type(exc) for exc in outcome] == [TenantNotFound]
    assert "dropped meanwhile" in str(outcome[0])
    with engine.connect() as conn:
        assert count_jobs(conn, kind) == 0


def _blocked_by(engine: Engine, pid: int | None) -> bool:
    """Whether a session waits for a lock that session ``pid`` holds."""
    blocking = sa.func.pg_blocking_pids(sa.column("pid"))
    query = sa.select(sa.func.count()).select_from(sa.table("pg_stat_activity"))
    with engine.connect() as conn:
        return bool(conn.scalar(query.where(sa.literal(pid) == sa.any_(blocking))))
