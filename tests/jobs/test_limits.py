"""Per-tenant limits: jobs running at once and started a second, held by every claim.

The claims here name a kind of their own (or two), so that other tests' jobs never take part;
the tenants are registry rows of their own, so no other test's limit applies.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection, Engine

from dms import jobs, tenancy
from dms.errors import NotFound, TenantNotFound, ValidationError
from dms.jobs import _statements as statements
from dms.jobs.claims import claim_params
from dms.jobs.pipeline import claim_outcome
from dms.jobs.tables import job_limits, processing_jobs
from tests.conftest import plan_nodes
from tests.jobs.conftest import wait_for

LONG_LEASE = timedelta(minutes=5)


def _enqueue(
    engine: Engine, kind: str, tenant: str, count: int, *, priority: int = 0
) -> list[jobs.Enqueued]:
    with engine.begin() as conn:
        return jobs.enqueue_many(
            conn, [jobs.NewJob(kind=kind, payload={}, tenant=tenant, priority=priority)] * count
        )


def _claim(engine: Engine, kinds: list[str], limit: int) -> list[jobs.Job]:
    with engine.begin() as conn:
        return jobs.dequeue(conn, "w", kinds=kinds, limit=limit, lease=LONG_LEASE)


def _limit(engine: Engine, tenant: str, **limits: object) -> None:
    with engine.begin() as conn:
        jobs.set_limit(conn, jobs.Limit(tenant=tenant, **limits))  # type: ignore[arg-type]


def _running(engine: Engine, tenant: str, kind: str | None = None) -> int:
    query = sa.select(sa.func.count()).where(
        processing_jobs.c.tenant == tenant, processing_jobs.c.state == "running"
    )
    if kind is not None:
        query = query.where(processing_jobs.c.kind == kind)
    with engine.connect() as conn:
        return conn.scalar(query) or 0


def _complete(engine: Engine, claimed: list[jobs.Job]) -> None:
    with engine.begin() as conn:
        jobs.complete_many(conn, claimed)


def test_limits_are_set_listed_replaced_and_removed(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (tenant,) = tenants(1)
    _limit(engine, tenant, max_running=3)
    _limit(engine, tenant, kind=kind, per_second=2.5)
    _enqueue(engine, kind, tenant, 2)
    _claim(engine, [kind], 1)
    with engine.begin() as conn:
        listed = jobs.list_limits(conn, tenant=tenant)
    assert [(s.limit, s.running) for s in listed] == [
        (jobs.Limit(tenant=tenant, max_running=3), 1),
        (jobs.Limit(tenant=tenant, kind=kind, per_second=2.5), 1),
    ]
    _limit(engine, tenant, max_running=5, per_second=1)
    with engine.begin() as conn:
        jobs.remove_limit(conn, tenant, kind=kind)
        listed = jobs.list_limits(conn, tenant=tenant)
        with pytest.raises(NotFound, match="no limit"):
            jobs.remove_limit(conn, tenant, kind=kind)
    assert [s.limit for s in listed] == [jobs.Limit(tenant=tenant, max_running=5, per_second=1)]


def test_a_tenant_never_has_more_jobs_running_than_its_limit(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    limited, other = tenants(2)
    _limit(engine, limited, max_running=3)
    _enqueue(engine, kind, limited, 10)
    _enqueue(engine, kind, other, 10)
    first = _claim(engine, [kind], 20)
    assert Counter(job.tenant for job in first) == {limited: 3, other: 10}
    assert [job.tenant for job in _claim(engine, [kind], 20)] == []
    _complete(engine, [job for job in first if job.tenant == limited][:2])
    assert [job.tenant for job in _claim(engine, [kind], 20)] == [limited] * 2
    assert _running(engine, limited) == 3


def test_a_limit_of_zero_pauses_a_tenant_and_raising_it_resumes_without_restarts(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (tenant,) = tenants(1)
    _limit(engine, tenant, max_running=0)
    _enqueue(engine, kind, tenant, 5)
    assert _claim(engine, [kind], 5) == []
    _limit(engine, tenant, max_running=4)
    assert len(_claim(engine, [kind], 5)) == 4


def test_a_kind_limit_bounds_that_kind_only_and_others_pass_it(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (tenant,) = tenants(1)
    other_kind = f"{kind}.other"
    _limit(engine, tenant, kind=kind, max_running=1)
    _enqueue(engine, kind, tenant, 20)  # first in the queue
    _enqueue(engine, other_kind, tenant, 5, priority=1)
    kinds = [kind, other_kind]
    assert Counter(job.kind for job in _claim(engine, kinds, 10)) == {kind: 1}
    # The limited kind is spent: the claim passes its jobs to reach the others.
    assert Counter(job.kind for job in _claim(engine, kinds, 10)) == {other_kind: 5}
    assert _running(engine, tenant, kind) == 1


def test_every_limit_that_applies_must_allow_a_job(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (tenant,) = tenants(1)
    other_kind = f"{kind}.other"
    _limit(engine, tenant, max_running=4)
    _limit(engine, tenant, kind=kind, max_running=1)
    _enqueue(engine, kind, tenant, 5)
    _enqueue(engine, other_kind, tenant, 5)
    claimed = _claim(engine, [kind, other_kind], 10) + _claim(engine, [kind, other_kind], 10)
    assert Counter(job.kind for job in claimed) == {kind: 1, other_kind: 3}


def test_a_rate_limit_starts_at_most_its_tokens_and_refills(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (tenant,) = tenants(1)
    _enqueue(engine, kind, tenant, 50)
    started = time.monotonic()
    _limit(engine, tenant, per_second=4)
    claimed = len(_claim(engine, [kind], 50))
    assert claimed == 4  # a full bucket: one second's worth
    deadline = time.monotonic() + 10
    while claimed < 10 and time.monotonic() < deadline:
        claimed += len(_claim(engine, [kind], 50))
        # Never more than the bucket and what it refilled since the limit was set.
        assert claimed <= 4 + 4 * (time.monotonic() - started) + 1e-9
        time.sleep(0.05)
    assert claimed >= 10  # and it does refill


def test_concurrent_claimers_together_keep_the_limit(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    """Eight threads claim and complete at once; no snapshot ever sees more than the limit."""
    (tenant,) = tenants(1)
    _limit(engine, tenant, max_running=5)
    _enqueue(engine, kind, tenant, 300)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def claimer() -> None:
        try:
            while not stop.is_set():
                claimed = _claim(engine, [kind], 3)
                time.sleep(0.002)
                _complete(engine, claimed)
        except BaseException as exc:  # reported by the test, never lost with the thread
            errors.append(exc)

    threads = [threading.Thread(target=claimer) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while _done(engine, kind) < 300 and time.monotonic() < deadline and not errors:
            seen.append(_running(engine, tenant))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert errors == []
    assert _done(engine, kind) == 300
    assert max(seen) <= 5
    assert max(seen) >= 2  # the threads did run side by side


def _done(engine: Engine, kind: str) -> int:
    with engine.connect() as conn:
        return (
            conn.scalar(
                sa.select(sa.func.count()).where(
                    processing_jobs.c.kind == kind, processing_jobs.c.state == "done"
                )
            )
            or 0
        )


def test_a_worker_keeps_a_limit_and_follows_its_change_without_a_restart(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (tenant,) = tenants(1)
    _limit(engine, tenant, max_running=1)
    _enqueue(engine, kind, tenant, 6)
    release = threading.Event()

    def blocked(uow: object, job: jobs.Job) -> None:
        release.wait(timeout=30)

    with jobs.Worker(engine, {kind: blocked}, jobs.WorkerConfig(concurrency=4, poll_seconds=0.1)):
        wait_for(lambda: _running(engine, tenant) == 1)
        time.sleep(0.3)  # several claims come and go: still one
        assert _running(engine, tenant) == 1
        _limit(engine, tenant, max_running=3)
        wait_for(lambda: _running(engine, tenant) == 3)
        release.set()
        wait_for(lambda: _done(engine, kind) == 6)


def test_an_autocommit_claim_leaves_limited_tenants_out(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    """Their lock would end with the statement that took it: the claim cannot count safely."""
    limited, other = tenants(2)
    _limit(engine, limited, max_running=10)
    _enqueue(engine, kind, limited, 2)
    _enqueue(engine, kind, other, 2)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        claimed = jobs.dequeue(conn, "w", kinds=[kind], limit=10, lease=LONG_LEASE)
    assert [job.tenant for job in claimed] == [other, other]


def test_a_limit_needs_a_registered_tenant_and_goes_with_it(engine: Engine) -> None:
    tenant = f"t{uuid.uuid4().hex[:12]}"
    with engine.begin() as conn, pytest.raises(TenantNotFound):
        jobs.set_limit(conn, jobs.Limit(tenant=tenant, max_running=1))
    with engine.begin() as conn:
        tenancy.register(conn, tenant)
    _limit(engine, tenant, max_running=1)
    with engine.begin() as conn:
        tenancy.unregister(conn, tenant)
        left = conn.scalar(sa.select(sa.func.count()).where(job_limits.c.tenant == tenant))
    assert left == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "max_running, per_second or both"),
        ({"max_running": -1}, "max_running must be"),
        ({"max_running": True}, "max_running must be"),
        ({"max_running": 2**31}, "max_running must be"),
        ({"per_second": 0}, "per_second must be"),
        ({"per_second": float("nan")}, "per_second must be"),
        ({"per_second": float("inf")}, "per_second must be"),
        ({"per_second": "5"}, "per_second must be"),
        ({"per_second": 1, "kind": ""}, "kind must be"),
    ],
)
def test_a_limit_refuses_what_it_cannot_hold(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        jobs.Limit(tenant="acme", **fields)  # type: ignore[arg-type]


def test_a_claim_told_of_no_limits_leaves_limited_tenants_out_and_says_they_exist(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    """A worker's claim without the limits' locks (it saw none last time) stays safe."""
    limited, other = tenants(2)
    _limit(engine, limited, max_running=10)
    _enqueue(engine, kind, limited, 2)
    _enqueue(engine, kind, other, 2)
    with engine.connect() as conn:
        lean = claim_outcome(conn, "w", kinds=[kind], limit=10, lease=LONG_LEASE, limits=False)
        full = claim_outcome(conn, "w", kinds=[kind], limit=10, lease=LONG_LEASE)
    assert [job.tenant for job in lean.jobs] == [other, other]
    assert (lean.limited, lean.limits) == (True, True)
    assert [job.tenant for job in full.jobs] == [limited, limited]


def test_locking_a_limited_tenant_reads_one_row_of_its_backlog(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    """Behind a backlog, the lock statement probes the queue index, not every queued row."""
    (tenant,) = tenants(1)
    _limit(engine, tenant, max_running=1)
    _enqueue(engine, kind, tenant, 3000)
    _analyze(engine)
    with engine.connect() as conn:
        read = _rows_read(conn, statements.lock_limits_statement(True), {"kinds": [kind]})
        conn.rollback()
    assert max(read) < 100, read


def test_a_limited_claim_counts_the_tenants_running_jobs_alone(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    """The count of the tenant's running jobs reads neither its past jobs nor their entries.

    Before revision 0018 the count read an index of every job the tenant ever had (or one of
    every tenant's running jobs, or both as bitmaps): 57,000 rows a claim behind a backlog
    (results/fairness.md). Nor the entries its finished jobs left while they ran, which a
    bitmap scan returns. Other tenants' running jobs may be read (through the lease index, as
    the planner chooses from statistics): few, where the tenant's past is thousands.
    """
    limited, other, *fleet = tenants(32)
    _limit(engine, limited, max_running=5)
    _enqueue(engine, kind, limited, 3003)
    _enqueue(engine, kind, other, 50)
    for tenant in fleet:  # the planner's estimate of a tenant's rows is theirs on average
        _enqueue(engine, kind, tenant, 1)
    for tenant in fleet[:3]:  # others' work, as a database shared by many tests holds
        _enqueue(engine, f"{kind}.other", tenant, 1000)
    running = {"locked_by": "w", "lease_expires_at": sa.func.now() + LONG_LEASE}
    # The limited tenant's past: 3,000 jobs claimed, then finished, so that the index entries
    # they had while running are dead (no VACUUM runs in between).
    _move(engine, limited, kind, 3000, state="running", **running)
    _move(engine, other, kind, 50, state="running", **running)
    _analyze(engine)  # statistics taken mid-burst: the planner expects many running jobs
    _finish(engine, limited, kind)
    _move(engine, limited, kind, 2, state="running", **running)
    params = claim_params("w", [kind], 10, LONG_LEASE)
    with engine.connect() as conn:
        conn.execute(statements.queue_order_statement())
        conn.execute(statements.lock_limits_statement(True), params)
        read = _rows_read(conn, statements.claim_statement(True), params)
        conn.rollback()
    assert _running(engine, limited) == 2  # the claim's rows were rolled back
    assert max(read) < 1000, read


def _move(engine: Engine, tenant: str, kind: str, count: int, **values: Any) -> None:
    """Set ``values`` on ``count`` queued jobs of ``tenant``, as a claim or completion would."""
    first = (
        sa.select(processing_jobs.c.id)
        .where(
            processing_jobs.c.tenant == tenant,
            processing_jobs.c.kind == kind,
            processing_jobs.c.state == "queued",
        )
        .limit(count)
    )
    with engine.begin() as conn:
        conn.execute(
            sa.update(processing_jobs).where(processing_jobs.c.id.in_(first)).values(**values)
        )


def _finish(engine: Engine, tenant: str, kind: str) -> None:
    """Record every running job of ``tenant`` and ``kind`` done."""
    with engine.begin() as conn:
        conn.execute(
            sa.update(processing_jobs)
            .where(
                processing_jobs.c.tenant == tenant,
                processing_jobs.c.kind == kind,
                processing_jobs.c.state == "running",
            )
            .values(state="done", locked_by=None, lease_expires_at=None, finished_at=sa.func.now())
        )


def _analyze(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE dms.processing_jobs"))


def _rows_read(conn: Connection, statement: sa.Executable, params: dict[str, Any]) -> list[int]:
    """The rows each node of ``statement``'s plan read (per loop), run in ``conn``'s transaction."""
    compiled = sa.ClauseElement.compile(statement, dialect=conn.dialect)  # type: ignore[arg-type]
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    cursor.execute(
        sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(sql.SQL(compiled.string)),
        compiled.construct_params(params),
    )
    (plan,) = cursor.fetchone()
    # A filter's rejects were read too: an index scan that keeps 2 rows of 3,002 read 3,002.
    return [
        node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        for node in plan_nodes(plan[0]["Plan"])
    ]
