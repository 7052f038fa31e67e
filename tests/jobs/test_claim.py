"""Claims: the jobs a claim returns are the rows as stored, and its plans stay on the indexes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine

from dms import jobs
from dms.errors import ValidationError
from dms.jobs import _statements as statements
from dms.jobs import claims, validation
from dms.jobs.tables import processing_jobs
from tests.jobs.conftest import frontend_messages

LONG_LEASE = timedelta(minutes=5)


@pytest.fixture
def tenant(module_tenant: str) -> str:
    """Every test here puts only jobs of its own kind in its tenant, and filters every assertion
    by it: they share the module's (a tenant costs a fifth of a second here, seconds on Citus)."""
    return module_tenant


def _stored_after_a_failure(engine: Engine, kind: str, tenant: str) -> None:
    """A job with every optional column filled: key, backoff, error history."""
    policy = jobs.Backoff(initial_seconds=0, step_seconds=0, maximum_seconds=0)
    with engine.begin() as conn:
        jobs.enqueue(
            conn,
            kind,
            {"nested": [1, 2.5, None, "é"]},
            tenant=tenant,
            idempotency_key="full",
            priority=-7,
            backoff=policy,
        )
        (first,) = jobs.dequeue(conn, "w0", kinds=[kind], lease=LONG_LEASE)
        jobs.fail(conn, first, "boom")


@pytest.mark.parametrize("claim", ["claim_batch", "dequeue"])
def test_a_claimed_job_equals_the_stored_row(
    engine: Engine, tenant: str, kind: str, claim: str
) -> None:
    _stored_after_a_failure(engine, kind, tenant)
    with engine.connect() as conn:
        if claim == "claim_batch":
            (job,) = jobs.claim_batch(conn, "w1", kinds=[kind], limit=10, lease=LONG_LEASE)
        else:
            with conn.begin():
                (job,) = jobs.dequeue(conn, "w1", kinds=[kind], limit=10, lease=LONG_LEASE)
        stored = jobs.get(conn, job.id)
    assert job == stored
    assert job.errors
    assert job.backoff is not None
    assert job.idempotency_key == "full"
    assert job.lease_expires_at == job.started_at + LONG_LEASE  # type: ignore[operator]


def test_a_claim_reads_timestamps_to_the_microsecond(
    engine: Engine, tenant: str, kind: str
) -> None:
    moments = [
        datetime(2020, 2, 29, 23, 59, 59, 999_999, tzinfo=timezone.utc),
        datetime(1999, 12, 31, 23, 59, 59, 1, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2024, 6, 1, 12, 0, 0, 500_000, tzinfo=timezone.utc),
    ]
    with engine.begin() as conn:
        for run_at in moments:
            jobs.enqueue(conn, kind, {}, tenant=tenant, run_at=run_at)
    with engine.connect() as conn:
        claimed = jobs.claim_batch(conn, "w", kinds=[kind], limit=10, lease=LONG_LEASE)
    assert sorted(job.run_at for job in claimed) == sorted(moments)


def test_claim_batch_refuses_to_run_inside_a_transaction(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant)
    with engine.connect() as conn, conn.begin():
        conn.execute(sa.select(1))
        with pytest.raises(ValidationError):
            jobs.claim_batch(conn, "w", kinds=[kind], limit=1, lease=LONG_LEASE)


def test_claim_batch_commits_its_claim_on_an_autocommit_connection(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        (job,) = jobs.claim_batch(conn, "w", kinds=[kind], limit=1, lease=LONG_LEASE)
    with engine.connect() as conn:
        assert jobs.get(conn, job.id).state is jobs.JobState.RUNNING


def test_a_failed_claim_raises_a_dbapi_error_and_leaves_no_transaction(
    engine: Engine, kind: str
) -> None:
    with engine.connect() as conn:
        other = engine.connect()
        pid = conn.scalar(sa.select(sa.func.pg_backend_pid()))
        conn.commit()
        other.execute(sa.select(sa.func.pg_terminate_backend(pid)))
        other.close()
        with pytest.raises(sa.exc.DBAPIError) as raised:
            jobs.claim_batch(conn, "w", kinds=[kind], limit=1, lease=LONG_LEASE)
        assert raised.value.connection_invalidated
        assert conn.invalidated  # the pool will not hand the dead connection out again


@pytest.mark.parametrize("isolation", ["READ COMMITTED", "AUTOCOMMIT"])
def test_a_claim_is_one_round_trip(engine: Engine, tenant: str, kind: str, isolation: str) -> None:
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant)
    with engine.connect().execution_options(isolation_level=isolation) as conn:
        conn.execute(sa.select(1))
        conn.commit()

        def claim() -> None:
            assert len(jobs.claim_batch(conn, "w", kinds=[kind], limit=5, lease=LONG_LEASE)) == 1

        sent = frontend_messages(conn, claim)
        driver = conn.connection.driver_connection
        assert driver.autocommit is (isolation == "AUTOCOMMIT")  # type: ignore[union-attr]
    # One Sync: the server answers everything at once, BEGIN to COMMIT.
    assert sent.count("Sync") == 1
    assert set(sent[sent.index("Sync") + 1 :]) <= {"Flush"}
    # The connection's first claim: every statement is parsed (Parse <name> <query> ...).
    queries = [message.split()[2] for message in sent if message.startswith("Parse")]
    assert [queries[0], queries[-1]] == ['"BEGIN"', '"COMMIT"']


def test_a_claim_the_server_refuses_is_rolled_back_and_the_connection_stays_usable(
    engine: Engine, tenant: str, kind: str
) -> None:
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant)
    with engine.connect() as conn:
        # Every transaction of this session is read-only: the claim's UPDATE fails mid-pipeline.
        conn.exec_driver_sql("SET default_transaction_read_only = on")
        conn.commit()
        with pytest.raises(sa.exc.DBAPIError) as raised:
            jobs.claim_batch(conn, "w", kinds=[kind], limit=1, lease=LONG_LEASE)
        assert raised.value.orig.sqlstate == "25006"  # type: ignore[union-attr]
        assert not raised.value.connection_invalidated
        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert driver.autocommit is False
        conn.exec_driver_sql("SET default_transaction_read_only = off")
        state = conn.scalar(
            sa.select(processing_jobs.c.state).where(processing_jobs.c.kind == kind)
        )
        conn.commit()
    assert state == "queued"


@pytest.mark.parametrize(
    "bad",
    [
        {"worker_id": ""},
        {"limit": 0},
        {"lease": timedelta(0)},
        {"lease": 30},
        {"lease": validation.MAX_LEASE + timedelta(microseconds=1)},
        {"lease": timedelta(days=999_999_999)},
    ],
)
def test_claim_batch_refuses_bad_input_and_claims_nothing(
    engine: Engine, tenant: str, kind: str, bad: dict[str, object]
) -> None:
    arguments: dict[str, Any] = {"worker_id": "w", "limit": 1, "lease": LONG_LEASE, **bad}
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant)
    with engine.connect() as conn:
        with pytest.raises(ValidationError):
            jobs.claim_batch(conn, kinds=[kind], **arguments)
        queued = conn.scalar(
            sa.select(sa.func.count()).where(
                processing_jobs.c.kind == kind, processing_jobs.c.state == "queued"
            )
        )
    assert queued == 1


def _plan(engine: Engine, statement: sa.Executable, params: dict[str, object]) -> str:
    with engine.connect() as conn:
        compiled = sa.ClauseElement.compile(statement, dialect=conn.dialect)  # type: ignore[arg-type]
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        explain = sql.SQL("EXPLAIN {}").format(sql.SQL(compiled.string))
        cursor.execute(explain, compiled.construct_params(params))
        return "\n".join(row[0] for row in cursor.fetchall())


def test_claim_and_completion_plans_look_jobs_up_by_primary_key(
    engine: Engine, tenant: str, kind: str
) -> None:
    # Many rows and fresh statistics: what made the planner prefer a hash join over a
    # sequential scan of the whole table to primary-key lookups for a claim of 500.
    with engine.begin() as conn:
        jobs.enqueue_many(conn, [jobs.NewJob(kind=kind, payload={}, tenant=tenant)] * 5000)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE dms.processing_jobs"))
    claim = _plan(
        engine,
        statements.claim_statement(True),
        claims.claim_params("w", [kind], 500, LONG_LEASE),
    )
    acked = '[{"position": 1, "id": "00000000000000000000000000000000", "locked_by": "w", '
    acked += '"attempts": 1}]'
    completion = _plan(engine, statements.complete_many_statement(), {"acked": acked})
    for plan in (claim, completion):
        assert "Seq Scan on processing_jobs" not in plan, plan
        assert "pk_processing_jobs" in plan, plan


def test_an_enqueue_without_key_is_one_statement_that_also_notifies(
    engine: Engine, tenant: str, kind: str
) -> None:
    # On an autocommit connection each statement commits: a wake-up sent by a statement of its
    # own before the insert would reach workers before the job could be seen.
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        sa.event.listen(conn, "before_cursor_execute", record)
        jobs.enqueue(conn, kind, {}, tenant=tenant)
        sa.event.remove(conn, "before_cursor_execute", record)
    assert len(statements) == 1
    assert "INSERT INTO dms.processing_jobs" in statements[0]
    assert "pg_notify" in statements[0]
