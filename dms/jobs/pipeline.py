"""A worker's claim in one round trip: ``BEGIN``, settings, claim and ``COMMIT`` pipelined.

SQLAlchemy cannot pipeline, so :func:`claim_batch` runs the claim's Core statements, compiled
once, on the psycopg connection under the SQLAlchemy one.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms.errors import ValidationError
from dms.jobs._driver import compiled
from dms.jobs._rows import Claimed, read_claim
from dms.jobs._statements import (
    claim_statement,
    claimer_settings_statement,
    lock_limits_statement,
)
from dms.jobs.claims import claim_params
from dms.jobs.model import Job
from dms.jobs.validation import require_claim


def claim_batch(
    conn: Connection,
    worker_id: str,
    *,
    kinds: Collection[str] | None,
    limit: int,
    lease: timedelta,
    after_tenant: str = "",
) -> list[Job]:
    """:func:`dequeue` without the reclaim, in a transaction of its own: a worker's claim.

    ``after_tenant``: where the claim's walk of tenants starts (see :func:`dequeue`).

    ``BEGIN``, the claimer's settings (see :func:`claimer_settings_statement`), the locks of
    limited tenants (:func:`lock_limits_statement`), the claim and ``COMMIT`` go to the server
    together, in psycopg's pipeline mode: one round trip instead of five (SQLAlchemy cannot
    pipeline, so they run on the driver connection under ``conn``, compiled from the same Core
    statements). ``conn`` must not be in a transaction
    (:class:`~dms.errors.ValidationError` otherwise); it may be autocommit. Database errors
    are raised as SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError`, as ``conn.execute``
    raises them, and leave no transaction open: the connection stays usable unless it broke.
    """
    return claim_outcome(
        conn, worker_id, kinds=kinds, limit=limit, lease=lease, after_tenant=after_tenant
    ).jobs


def claim_outcome(
    conn: Connection,
    worker_id: str,
    *,
    kinds: Collection[str] | None,
    limit: int,
    lease: timedelta,
    after_tenant: str = "",
    limits: bool = True,
) -> Claimed:
    """:func:`claim_batch`, also saying what the claim saw of limits (:class:`Claimed`).

    ``limits=False`` leaves the tenants with limits out instead of locking them: no lock
    statement, and a claim statement without the limits' arithmetic (a claim of no-op jobs
    is that much faster). A claimer passes what the previous claim saw (``Claimed.limits``);
    with ``limits=False`` a claim still never exceeds a limit, it only takes no job of a
    limited tenant. A claimer that took fewer jobs than it asked for waits for new jobs; when a
    limit may have held the claim back, it comes back sooner (:mod:`dms.jobs.worker._claimer`).
    """
    require_claim(worker_id, kinds, limit, lease)
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise ValidationError("claim_batch needs a psycopg connection")
    if driver.info.transaction_status != _IDLE:
        raise ValidationError("claim_batch runs its own transaction: call it outside one")
    params = claim_params(worker_id, kinds, limit, lease, after_tenant)
    settings = compiled(claimer_settings_statement(), conn.dialect)
    lock = compiled(lock_limits_statement(kinds is not None), conn.dialect) if limits else None
    claim = compiled(claim_statement(kinds is not None, limits), conn.dialect)
    autocommit = driver.autocommit
    cursor = driver.cursor()
    try:
        # BEGIN and COMMIT as statements of an autocommit connection: psycopg's own transaction
        # handling waits for the server after BEGIN and again at COMMIT (libpq's trace shows
        # four Syncs); this way the pipeline sends its single Sync when it closes.
        driver.autocommit = True
        with driver.pipeline():
            driver.execute(_BEGIN)
            cursor.execute(settings.string, settings.construct_params())
            if lock is not None:  # its own statement: the claim's snapshot comes after the locks
                driver.execute(lock.string, lock.construct_params(params))
            cursor.execute(claim.string, claim.construct_params(params))
            driver.execute(_COMMIT)
        row = cursor.fetchone()
    except psycopg.Error as exc:
        broken = not _rolled_back(driver)
        if broken:  # what SQLAlchemy does for its own statements: the pool replaces it
            conn.invalidate(exc)
        raise sa.exc.DBAPIError.instance(
            claim.string, params, exc, psycopg.Error, connection_invalidated=broken
        ) from exc
    finally:
        cursor.close()
        if not driver.closed and driver.info.transaction_status == _IDLE:
            driver.autocommit = autocommit
    return read_claim(row[0] if row else None, worker_id)


_BEGIN = b"BEGIN"
_COMMIT = b"COMMIT"
_IDLE = psycopg.pq.TransactionStatus.IDLE


def _rolled_back(driver: psycopg.Connection[Any]) -> bool:
    """End the transaction a failed claim left aborted; False if the connection is broken."""
    if driver.closed:
        return False
    try:
        driver.rollback()
    except psycopg.Error:
        return False
    return driver.info.transaction_status == _IDLE
