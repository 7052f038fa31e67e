"""Claiming jobs: :func:`dequeue` for any caller, :func:`reclaim_expired` for expired leases.

A claim is ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT n`` feeding ``UPDATE ... RETURNING`` in
one statement, so two workers never claim the same row and never wait on each other. Expired
leases are taken back by a separate statement, so the hot claim only ever scans queued rows.
A worker's claim in one round trip is :func:`dms.jobs.pipeline.claim_batch`.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from sqlalchemy.engine import Connection

from dms.domain.validation import check_flag
from dms.errors import ValidationError
from dms.jobs._rows import claimed_jobs, job_of_row
from dms.jobs._statements import (
    QUEUE_ORDER_SETTINGS,
    claim_statement,
    lock_limits_statement,
    queue_order_statement,
    reclaim_statement,
    release_unheld_statement,
    restore_order_statement,
)
from dms.jobs.executor import Executor, connection_of
from dms.jobs.model import Job
from dms.jobs.validation import (
    require_claim,
    require_int,
    require_name,
    require_names,
)

#: How long a claim holds a job before another worker may take it over.
LEASE_SECONDS = 30
#: Most tenants one claim walks (fewer when it claims fewer jobs): a claim costs an index
#: probe per tenant walked, and claims go round more tenants than this by :func:`next_after`.
CLAIM_TENANTS = 64


def dequeue(
    target: Executor,
    worker_id: str,
    *,
    kinds: Collection[str] | None = None,
    limit: int = 1,
    lease: timedelta = timedelta(seconds=LEASE_SECONDS),
    reclaim: bool = True,
    after_tenant: str = "",
) -> list[Job]:
    """Claim up to ``limit`` runnable jobs for ``worker_id`` (of ``kinds``, default any).

    Runnable: ``queued`` with ``run_at`` passed. The claim is shared between the tenants that
    have runnable jobs, walked in name order after ``after_tenant`` (at most
    :data:`CLAIM_TENANTS`, and at most ``limit``): each gets an equal share, its jobs by
    ``priority``, then ``run_at``; to go round every tenant, pass the previous claim's
    :func:`next_after` (``dms.jobs.Worker`` does). A claim sets
    ``state = 'running'``, ``locked_by``, the lease and ``attempts + 1``. Rows locked by other
    claims are skipped, not waited for. Commit promptly: the claim is invisible to other workers
    until then.

    With ``reclaim`` (the default), :func:`reclaim_expired` runs first, so jobs whose lease
    expired (their worker died) are taken over by this claim: such a reclaim counts as an
    attempt, and a job whose lease expired on its last attempt goes to ``dead`` instead. That is
    a second, cheap statement (an index scan of the running rows); a caller that reclaims on its
    own schedule, as :class:`~dms.jobs.Worker` does, passes ``reclaim=False`` and claims in two
    statements (the limited tenants' locks, then the claim), whose text depends only on whether
    ``kinds`` is given (so they are prepared once per connection).

    In a transaction, the claim runs with ``enable_sort``, ``enable_bitmapscan`` and ``jit`` off
    (restored afterwards), so that it always walks the queue index in order and stops after
    ``limit`` rows, whatever the table's statistics say (two more round trips). On an autocommit
    connection the settings would not last until the claim, so the planner decides alone, and
    tenants with limits (:mod:`dms.jobs.limits`) are left out of the claim: their locks would
    end with the statement that took them.
    """
    require_claim(worker_id, kinds, limit, lease)
    check_flag("reclaim", reclaim)
    if after_tenant != "":
        require_name("after_tenant", after_tenant)
    conn = connection_of(target)
    if reclaim:
        reclaim_expired(conn, kinds=kinds)
    params = claim_params(worker_id, kinds, limit, lease, after_tenant)
    if _autocommit(conn):
        return _claim(conn, worker_id, params)
    row = conn.execute(queue_order_statement()).one()._mapping
    previous = {name: row[name] for name in QUEUE_ORDER_SETTINGS}
    try:
        return _claim(conn, worker_id, params)
    finally:
        if any(previous[name] != "off" for name in QUEUE_ORDER_SETTINGS):
            conn.execute(restore_order_statement(), previous)


def _claim(conn: Connection, worker_id: str, params: dict[str, Any]) -> list[Job]:
    filtered = "kinds" in params
    # Its own statement: the claim's snapshot must be taken after the locks.
    conn.execute(lock_limits_statement(filtered), params)
    document = conn.execute(claim_statement(filtered), params).scalar_one()
    return claimed_jobs(document, worker_id)


def claim_params(
    worker_id: str,
    kinds: Collection[str] | None,
    limit: int,
    lease: timedelta,
    after_tenant: str = "",
) -> dict[str, Any]:
    """The parameters of :func:`~dms.jobs._statements.claim_statement`."""
    params: dict[str, Any] = {
        "worker_id": worker_id,
        "limit": limit,
        "lease": lease,
        "after_tenant": after_tenant,
        "tenants": walked_tenants(limit),
    }
    if kinds is not None:
        params["kinds"] = list(kinds)
    return params


def walked_tenants(limit: int) -> int:
    """How many tenants a claim of ``limit`` jobs walks at most."""
    return min(CLAIM_TENANTS, limit)


def next_after(claimed: Collection[Job], limit: int, after: str = "") -> str:
    """Where the next claim's walk starts, after a claim of ``limit`` from ``after``.

    After the last tenant of a full walk (the claim got jobs of as many tenants as it walks),
    so that the next claim serves the tenants that come after it. The walk goes past the last
    tenant to the first ones (those not after ``after``), so its last tenant is the greatest
    of those if it got there, else the greatest of all. After a walk that was not full, every
    tenant with runnable jobs got its share: from the first one again.
    """
    tenants = {job.tenant for job in claimed}
    if len(tenants) < walked_tenants(limit):
        return ""
    wrapped = [tenant for tenant in tenants if tenant <= after]
    return max(wrapped or tenants)


def _autocommit(conn: Connection) -> bool:
    driver = conn.connection.driver_connection
    return bool(getattr(driver, "autocommit", False))


def reclaim_expired(
    target: Executor, *, kinds: Collection[str] | None = None, limit: int = 1000
) -> list[Job]:
    """Take back up to ``limit`` running jobs (of ``kinds``) whose lease expired; return them.

    Their worker died or stalled past its lease. Each such lease counts as the attempt it was:
    the job gets the error ``lease of worker W expired during attempt N`` (as ``last_error``
    and in its ``errors`` history) and goes back to ``queued`` (``run_at`` unchanged, so it is
    claimed again before newer jobs), or to ``dead`` when that was its last attempt, so a job
    that kills its worker every time ends in the dead letter. The next claim increments
    ``attempts``, so the old worker's fence ``(id, locked_by, attempts, running)`` no longer
    matches and its late acknowledgements raise :class:`~dms.errors.LeaseLost` (already now:
    the job is no longer ``running``). Rows locked by others are skipped, not waited for.
    """
    require_int("limit", limit, minimum=1)
    if kinds is not None:
        require_names("kinds", kinds)
    params: dict[str, Any] = {"limit": limit}
    if kinds is not None:
        params["kinds"] = list(kinds)
    rows = connection_of(target).execute(reclaim_statement(kinds is not None), params).all()
    return [job_of_row(row) for row in rows]


def release_unheld(target: Executor, worker_id: str, *, held: Collection[uuid.UUID]) -> list[Job]:
    """Give back the jobs ``running`` under ``worker_id`` but not in ``held``; return them.

    For a worker that may have lost track of jobs it claimed: a claim whose ``COMMIT`` went
    through but whose reply was lost with the connection, an outcome it gave up recording.
    Without this they would stay ``running`` until their lease expired, and then count as an
    attempt they never made. Each goes back to ``queued`` as :func:`~dms.jobs.release` puts
    a job back, its attempt not counted. Only the worker itself may call this, and only while
    no claim of its own is in flight: a claim committed but not yet in ``held`` would be
    released under it (its late acknowledgement then raises :class:`~dms.errors.LeaseLost`).
    """
    require_name("worker_id", worker_id)
    ids = list(held)
    if not all(isinstance(job_id, uuid.UUID) for job_id in ids):
        raise ValidationError("held must hold job ids (uuid.UUID)")
    rows = connection_of(target).execute(
        release_unheld_statement(), {"worker_id": worker_id, "held": ids}
    )
    return [job_of_row(row) for row in rows]
