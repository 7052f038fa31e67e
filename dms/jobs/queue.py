"""Every statement on the job queue's tables: enqueue, claim, acknowledge, requeue, inspect.

All functions take a SQLAlchemy ``Connection`` or a :class:`~dms.uow.UnitOfWork` and run in the
caller's transaction: a job enqueued in a unit of work that rolls back was never enqueued, and a
claim is only visible to other workers once the caller commits. The queue tables live in the
shared schema ``dms`` and are declared with that schema explicitly, so a tenant-routed connection
reaches them unchanged.

Concurrency rests on PostgreSQL alone:

* **idempotent enqueue**: ``INSERT ... ON CONFLICT DO NOTHING`` on the ledger's primary key
  ``(tenant, kind, idempotency_key)``; a racing enqueue waits on the unique index until the first
  commits, then inserts nothing and reads the winner's job id;
* **claims**: ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT n`` feeding ``UPDATE ... RETURNING`` in
  one statement, so two workers never claim the same row and never wait on each other;
* **reclaims**: a separate statement, :func:`reclaim_expired`, puts ``running`` jobs whose lease
  expired back to ``queued`` (or ``dead``), so the hot claim only ever scans queued rows;
* **fencing**: an acknowledgement matches ``(id, locked_by, attempts, state = 'running')``; a
  reclaimed job is ``queued`` and its next claim increments ``attempts``, so the late worker
  matches nothing and gets :class:`~dms.errors.LeaseLost`.

Transactions are expected at READ COMMITTED (PostgreSQL's default).
"""

from __future__ import annotations

import functools
import json
import traceback
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert
from sqlalchemy.engine import Connection, Row
from sqlalchemy.types import TypeEngine

from dms import tenancy
from dms.errors import LeaseLost, NotFound, TenantNotFound, ValidationError
from dms.jobs import wire
from dms.jobs.backoff import DEFAULT_BACKOFF, Backoff
from dms.jobs.ids import new_job_ids
from dms.jobs.model import Job, JobState, PruneResult, QueueStats, StateCount
from dms.jobs.tables import job_idempotency_keys as ledger
from dms.jobs.tables import processing_jobs as jobs
from dms.repositories.errors import constraint_of
from dms.schema.shared import tenants
from dms.uow import UnitOfWork

#: The LISTEN/NOTIFY channel on which enqueue wakes workers up.
NOTIFY_CHANNEL = "dms_jobs"
#: Attempts of a job that sets none.
DEFAULT_MAX_ATTEMPTS = 25
#: How long a claim holds a job before another worker may take it over.
LEASE_SECONDS = 30
#: The longest lease accepted: far beyond any sensible one, and ``now() + lease`` stays a
#: timestamp PostgreSQL can store (a lease of millions of years would fail in the server).
MAX_LEASE = timedelta(days=365)
#: How long the ledger remembers an idempotency key after the enqueue that used it.
KEY_RETENTION_DAYS = 7
#: Finished jobs younger than this survive :func:`prune` by default.
JOB_RETENTION_DAYS = 7
#: Longest error text kept in ``last_error``; tracebacks are cut from the front, where the
#: least relevant frames are.
MAX_ERROR_CHARS = 8000

_MAX_NAME_CHARS = 200
_INT32 = 2**31 - 1

#: A connection, or a unit of work whose connection is used.
Executor = Connection | UnitOfWork


class Enqueued(NamedTuple):
    """The job an enqueue refers to, and whether this call created it."""

    job_id: uuid.UUID
    created: bool


@dataclass(frozen=True, kw_only=True)
class NewJob:
    """A job to enqueue; invalid values raise :class:`~dms.errors.ValidationError` here."""

    kind: str
    payload: Any
    tenant: str
    idempotency_key: str | None = None
    run_at: datetime | None = None
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff | None = None

    def __post_init__(self) -> None:
        """Check everything that can be checked without the database."""
        tenancy.validate_slug(self.tenant)
        _require_name("kind", self.kind)
        if self.idempotency_key is not None:
            _require_name("idempotency_key", self.idempotency_key)
        _require_json(self.payload)
        _require_int("priority", self.priority, minimum=-_INT32)
        _require_int("max_attempts", self.max_attempts, minimum=1)
        if self.run_at is not None and (
            not isinstance(self.run_at, datetime) or self.run_at.utcoffset() is None
        ):
            raise ValidationError(f"run_at must be a timezone-aware datetime, not {self.run_at!r}")
        if self.backoff is not None and not isinstance(self.backoff, Backoff):
            raise ValidationError(f"backoff must be a Backoff, not {type(self.backoff).__name__}")


def _require_name(field: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > _MAX_NAME_CHARS:
        raise ValidationError(
            f"{field} must be a non-blank string of at most {_MAX_NAME_CHARS} characters, "
            f"not {value!r}"
        )


def _require_int(field: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _INT32:
        raise ValidationError(
            f"{field} must be an integer from {minimum} to {_INT32}, not {value!r}"
        )


#: Made once: ``json.dumps`` with a non-default option builds an encoder per call (1 µs).
_STRICT_JSON = json.JSONEncoder(allow_nan=False)


def _require_json(payload: object) -> None:
    try:
        text = _STRICT_JSON.encode(payload)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"payload is not JSON-serialisable: {exc}") from None
    # jsonb cannot store U+0000 and would reject it only at insert time.
    if "\\u0000" in text:
        raise ValidationError("payload contains the character U+0000, which jsonb cannot store")


def _conn(target: Executor) -> Connection:
    return target.connection if isinstance(target, UnitOfWork) else target


# --- enqueue ------------------------------------------------------------------------------


def enqueue(
    target: Executor,
    kind: str,
    payload: Any,
    *,
    tenant: str,
    idempotency_key: str | None = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    backoff: Backoff | None = None,
    key_retention: timedelta = timedelta(days=KEY_RETENTION_DAYS),
) -> Enqueued:
    """Enqueue one job in the caller's transaction; see :func:`enqueue_many`.

    ``priority``: smaller runs first (default 0). ``run_at``: not before (default now).
    ``max_attempts``: claims before the job goes dead (default :data:`DEFAULT_MAX_ATTEMPTS`).
    """
    job = NewJob(
        kind=kind,
        payload=payload,
        tenant=tenant,
        idempotency_key=idempotency_key,
        run_at=run_at,
        priority=priority,
        max_attempts=DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts,
        backoff=backoff,
    )
    return enqueue_many(target, [job], key_retention=key_retention)[0]


def enqueue_many(
    target: Executor,
    new_jobs: Sequence[NewJob],
    *,
    key_retention: timedelta = timedelta(days=KEY_RETENTION_DAYS),
) -> list[Enqueued]:
    """Enqueue a batch in one statement; one result per input, in order.

    A job with an idempotency key whose ``(tenant, kind, key)`` the ledger already holds (or that
    an earlier job of the same batch uses) is not inserted: its result is the original job's id
    with ``created=False``, also while the original is uncommitted in another transaction (this
    call then waits for it) and after it finished, for ``key_retention`` and until pruned.

    Raises :class:`~dms.errors.TenantNotFound` for an unregistered tenant, and then writes
    nothing (the caller's transaction stays usable). Wakes listening workers with
    ``pg_notify``, delivered when the caller commits. A batch without idempotency keys is one
    statement, hence one round trip; on an autocommit connection, one transaction.
    """
    if not new_jobs:
        return []
    if key_retention <= timedelta(0):
        raise ValidationError(f"key_retention must be positive, not {key_retention}")
    return _insert(_conn(target), new_jobs, key_retention)


def _insert(
    conn: Connection, new_jobs: Sequence[NewJob], key_retention: timedelta
) -> list[Enqueued]:
    ids = new_job_ids(len(new_jobs))
    slugs = sorted({job.tenant for job in new_jobs})
    keyed = any(job.idempotency_key is not None for job in new_jobs)
    params: dict[str, Any] = {
        "batch": _batch_document(new_jobs, ids),
        "slugs": slugs,
        "tenant_count": len(slugs),
    }
    if keyed:
        params["key_retention"] = key_retention
    try:
        result = conn.execute(_insert_statement(keyed=keyed), params)
    except sa.exc.DBAPIError as exc:
        # Only if a tenant was dropped between the statement's check and its insert.
        if constraint_of(exc) in _TENANT_FOREIGN_KEYS:
            raise TenantNotFound("a tenant of the batch was dropped meanwhile") from exc
        raise
    if not keyed:
        if result.scalar_one() == len(new_jobs):
            return [Enqueued(job_id, created=True) for job_id in ids]
        _require_tenants(conn, slugs)  # nothing was written: a tenant is missing
        return _insert(conn, new_jobs, key_retention)  # or it was created meanwhile
    created = set(result.scalars())
    if len(created) < len(new_jobs):
        _require_tenants(conn, slugs)  # keys were taken, or a tenant is missing
    results = _resolve_keys(conn, new_jobs, ids, created)
    # A key can vanish between the two statements only when it had expired and a concurrent
    # prune deleted it: it is free again, so those jobs are simply enqueued anew.
    vanished = [i for i, result in enumerate(results) if result is None]
    if vanished:
        again = iter(_insert(conn, [new_jobs[i] for i in vanished], key_retention))
        return [result if result is not None else next(again) for result in results]
    return [result for result in results if result is not None]


_TENANT_FOREIGN_KEYS = frozenset(
    {"fk_processing_jobs_tenant_tenants", "fk_job_idempotency_keys_tenant_tenants"}
)


def _tenants_known() -> sa.ColumnElement[bool]:
    """Every tenant of the batch (``:slugs``, ``:tenant_count`` of them) is registered.

    Evaluated once per statement, it also wakes listening workers: ``pg_notify`` once per known
    tenant (PostgreSQL folds repeated notifications), delivered when the caller commits, so
    never before the jobs can be seen. A statement whose tenants are not all known inserts
    nothing, and the caller's transaction stays usable.
    """
    slugs = sa.bindparam("slugs", type_=ARRAY(sa.Text))
    notified = (
        sa.select(sa.func.pg_notify(NOTIFY_CHANNEL, ""))
        .where(tenants.c.slug == sa.any_(slugs))
        .subquery("notified")
    )
    found = sa.select(sa.func.count()).select_from(notified).scalar_subquery()
    return found == sa.bindparam("tenant_count", type_=sa.Integer)


def _require_tenants(conn: Connection, slugs: Sequence[str]) -> None:
    """Raise :class:`~dms.errors.TenantNotFound` for the first of ``slugs`` not registered."""
    query = sa.select(tenants.c.slug).where(tenants.c.slug.in_(slugs))
    missing = sorted(set(slugs) - set(conn.scalars(query)))
    if missing:
        raise TenantNotFound(f"tenant {missing[0]!r} does not exist")


#: Columns of an enqueued batch, one object per job in one document (see :mod:`.wire`): the
#: statement's text does not depend on the batch size, so it is prepared once per connection
#: and has no parameter-count limit.
_BATCH_COLUMNS: tuple[tuple[str, TypeEngine[Any]], ...] = (
    ("id", sa.Uuid()),
    ("tenant", sa.Text()),
    ("kind", sa.Text()),
    ("payload", JSONB()),
    ("priority", sa.Integer()),
    ("max_attempts", sa.Integer()),
    ("run_at", sa.DateTime(timezone=True)),
    ("backoff", JSONB()),
    ("idempotency_key", sa.Text()),
)


def _batch_document(new_jobs: Sequence[NewJob], ids: Sequence[uuid.UUID]) -> str:
    return wire.encode(
        [
            {
                "id": job_id.hex,
                "tenant": job.tenant,
                "kind": job.kind,
                "payload": job.payload,
                "priority": job.priority,
                "max_attempts": job.max_attempts,
                "run_at": None if job.run_at is None else job.run_at.isoformat(),
                "backoff": None if job.backoff is None else job.backoff.to_json(),
                "idempotency_key": job.idempotency_key,
            }
            for job, job_id in zip(new_jobs, ids, strict=True)
        ]
    )


@functools.cache
def _insert_statement(*, keyed: bool) -> sa.Executable:
    """Insert the jobs of a batch; ``keyed``: only those whose key the ledger did not hold.

    ``WITH inserted AS (INSERT INTO processing_jobs SELECT ... FROM json_to_recordset(:batch)
    WHERE`` the tenants are known (:func:`_tenants_known`) ``RETURNING id) SELECT count(*)
    FROM inserted``, or with keys: ``WITH batch AS (SELECT ...
    WHERE`` the tenants are known ``), claimed_keys AS (INSERT INTO ledger SELECT ... FROM batch
    WHERE key IS NOT NULL ON CONFLICT DO NOTHING RETURNING job_id) INSERT INTO processing_jobs
    SELECT ... FROM batch WHERE key IS NULL OR id IN claimed_keys RETURNING id``.
    """
    recordset = wire.recordset("batch", _BATCH_COLUMNS)
    columns = [name for name, _ in _BATCH_COLUMNS]
    if not keyed:
        rows = _new_rows(recordset).where(_tenants_known())
        inserted = insert(jobs).from_select(columns, rows).returning(jobs.c.id).cte("inserted")
        return sa.select(sa.func.count()).select_from(inserted)
    batch = sa.select(recordset).where(_tenants_known()).cte("batch")
    expires_at = sa.func.now() + sa.bindparam("key_retention", type_=sa.Interval)
    claimed_keys = (
        insert(ledger)
        .from_select(
            ["tenant", "kind", "idempotency_key", "job_id", "expires_at"],
            sa.select(
                batch.c.tenant, batch.c.kind, batch.c.idempotency_key, batch.c.id, expires_at
            ).where(batch.c.idempotency_key.is_not(None)),
        )
        .on_conflict_do_nothing()
        .returning(ledger.c.job_id)
        .cte("claimed_keys")
    )
    free = batch.c.idempotency_key.is_(None) | batch.c.id.in_(sa.select(claimed_keys.c.job_id))
    statement = insert(jobs).from_select(columns, _new_rows(batch).where(free))
    # A data-modifying WITH must sit at the top of the statement.
    statement = statement.add_cte(batch, nest_here=True).add_cte(claimed_keys, nest_here=True)
    return statement.returning(jobs.c.id)


def _new_rows(batch: sa.FromClause) -> sa.Select[Any]:
    """The rows of ``batch`` in the order of :data:`_BATCH_COLUMNS`, defaults applied."""
    c = batch.c
    run_at = sa.func.coalesce(c.run_at, sa.func.now())
    return sa.select(
        c.id,
        c.tenant,
        c.kind,
        c.payload,
        c.priority,
        c.max_attempts,
        run_at,
        c.backoff,
        c.idempotency_key,
    )


def _resolve_keys(
    conn: Connection,
    new_jobs: Sequence[NewJob],
    ids: Sequence[uuid.UUID],
    created: set[uuid.UUID],
) -> list[Enqueued | None]:
    """Read the job ids of keys that were taken; this statement sees rows committed meanwhile.

    ``None`` for a key that is no longer in the ledger.
    """
    taken = [
        (job.tenant, job.kind, job.idempotency_key)
        for job, job_id in zip(new_jobs, ids, strict=True)
        if job_id not in created
    ]
    owners: dict[tuple[str, str, str | None], uuid.UUID] = {}
    if taken:
        key = sa.tuple_(ledger.c.tenant, ledger.c.kind, ledger.c.idempotency_key)
        query = sa.select(
            ledger.c.tenant, ledger.c.kind, ledger.c.idempotency_key, ledger.c.job_id
        ).where(key.in_(taken))
        owners = {(t, k, i): job_id for t, k, i, job_id in conn.execute(query)}
    results: list[Enqueued | None] = []
    for job, job_id in zip(new_jobs, ids, strict=True):
        if job_id in created:
            results.append(Enqueued(job_id, created=True))
            continue
        owner = owners.get((job.tenant, job.kind, job.idempotency_key))
        results.append(None if owner is None else Enqueued(owner, created=False))
    return results


# --- claiming -----------------------------------------------------------------------------


def dequeue(
    target: Executor,
    worker_id: str,
    *,
    kinds: Collection[str] | None = None,
    limit: int = 1,
    lease: timedelta = timedelta(seconds=LEASE_SECONDS),
    reclaim: bool = True,
) -> list[Job]:
    """Claim up to ``limit`` runnable jobs for ``worker_id`` (of ``kinds``, default any).

    Runnable: ``queued`` with ``run_at`` passed, by ``priority``, then ``run_at``. A claim sets
    ``state = 'running'``, ``locked_by``, the lease and ``attempts + 1``. Rows locked by other
    claims are skipped, not waited for. Commit promptly: the claim is invisible to other workers
    until then.

    With ``reclaim`` (the default), :func:`reclaim_expired` runs first, so jobs whose lease
    expired (their worker died) are taken over by this claim: such a reclaim counts as an
    attempt, and a job whose lease expired on its last attempt goes to ``dead`` instead. That is
    a second, cheap statement (an index scan of the running rows); a caller that reclaims on its
    own schedule, as :class:`~dms.jobs.Worker` does, passes ``reclaim=False`` and claims in one
    statement, whose text depends only on whether ``kinds`` is given (so it is prepared once per
    connection).

    In a transaction, the claim runs with ``enable_sort`` off (restored afterwards), so that it
    always walks the queue index in order and stops after ``limit`` rows, whatever the table's
    statistics say (two more round trips); on an autocommit connection the setting would not
    last until the claim, so the planner decides alone.
    """
    _require_claim(worker_id, limit, lease)
    conn = _conn(target)
    if reclaim:
        reclaim_expired(conn, kinds=kinds)
    if _autocommit(conn):
        return _claim(conn, worker_id, kinds=kinds, limit=limit, lease=lease)
    previous = conn.execute(_queue_order_statement()).scalar_one()
    try:
        return _claim(conn, worker_id, kinds=kinds, limit=limit, lease=lease)
    finally:
        if previous != "off":
            conn.execute(_restore_order_statement(), {"value": previous})


def claim_batch(
    conn: Connection,
    worker_id: str,
    *,
    kinds: Collection[str] | None,
    limit: int,
    lease: timedelta,
) -> list[Job]:
    """:func:`dequeue` without the reclaim, in a transaction of its own: a worker's claim.

    ``BEGIN``, the claimer's settings (see :func:`_claimer_settings_statement`), the claim and
    ``COMMIT`` go to the server together, in psycopg's pipeline mode: one round trip instead of
    four (SQLAlchemy cannot pipeline, so they run on the driver connection under ``conn``,
    compiled from the same Core statements). ``conn`` must not be in a transaction
    (:class:`~dms.errors.ValidationError` otherwise); it may be autocommit. Database errors
    are raised as SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError`, as ``conn.execute``
    raises them, and leave no transaction open: the connection stays usable unless it broke.
    """
    _require_claim(worker_id, limit, lease)
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise ValidationError("claim_batch needs a psycopg connection")
    if driver.info.transaction_status != _IDLE:
        raise ValidationError("claim_batch runs its own transaction: call it outside one")
    params = _claim_params(worker_id, kinds, limit, lease)
    settings = _compiled(_claimer_settings_statement(), conn.dialect)
    claim = _compiled(_claim_statement(kinds is not None), conn.dialect)
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
    return _claimed_jobs(row[0] if row else None, worker_id)


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


@functools.cache
def _compiled(statement: sa.Executable, dialect: sa.Dialect) -> sa.Compiled:
    """``statement`` compiled once for ``dialect``, for the driver-level execution above."""
    return sa.ClauseElement.compile(statement, dialect=dialect)  # type: ignore[arg-type]


def _claim(
    conn: Connection,
    worker_id: str,
    *,
    kinds: Collection[str] | None,
    limit: int,
    lease: timedelta,
) -> list[Job]:
    params = _claim_params(worker_id, kinds, limit, lease)
    document = conn.execute(_claim_statement(kinds is not None), params).scalar_one()
    return _claimed_jobs(document, worker_id)


def _claim_params(
    worker_id: str, kinds: Collection[str] | None, limit: int, lease: timedelta
) -> dict[str, Any]:
    params: dict[str, Any] = {"worker_id": worker_id, "limit": limit, "lease": lease}
    if kinds is not None:
        params["kinds"] = list(kinds)
    return params


def _claimed_jobs(document: str | None, worker_id: str) -> list[Job]:
    """The jobs of a claim's document (:func:`_claim_document`), in queue order."""
    if document is None:
        return []
    started, lease_end, rows = wire.decode(document)
    timestamps = wire.Timestamps()
    started_at, lease_expires_at = timestamps(started), timestamps(lease_end)
    claimed = [
        _claimed_job(row, worker_id, started_at, lease_expires_at, timestamps) for row in rows or ()
    ]
    # UPDATE ... RETURNING returns rows in no particular order; callers run them in queue order.
    # PostgreSQL orders UUIDs by their bytes, that is by their integer value (compared in C,
    # unlike UUID objects).
    return sorted(claimed, key=lambda job: (job.priority, job.run_at, job.id.int))


def _require_claim(worker_id: str, limit: int, lease: timedelta) -> None:
    _require_name("worker_id", worker_id)
    _require_int("limit", limit, minimum=1)
    validate_lease(lease)


def validate_lease(lease: object) -> timedelta:
    """Return ``lease`` if it is a positive timedelta of at most :data:`MAX_LEASE`.

    Raises :class:`~dms.errors.ValidationError` otherwise, before any SQL runs.
    """
    if not isinstance(lease, timedelta) or not timedelta(0) < lease <= MAX_LEASE:
        raise ValidationError(
            f"lease must be a timedelta above zero and at most {MAX_LEASE.days} days, not {lease!r}"
        )
    return lease


@functools.cache
def _claimer_settings_statement() -> sa.Executable:
    """For this transaction: ``enable_sort`` off, and commit without waiting for the WAL flush.

    ``enable_sort``: see :func:`_queue_order_statement`. Asynchronous commit is safe for a claim
    alone: a claim lost in a server crash leaves its jobs ``queued`` (claimed again, no attempt
    counted), and the claimant's fenced acknowledgement then matches nothing; PostgreSQL flushes
    WAL in order, so any later durable commit (a completion) makes the claim durable first.
    """
    return sa.select(
        sa.func.set_config("enable_sort", "off", sa.true()),
        sa.func.set_config("synchronous_commit", "off", sa.true()),
    )


def _autocommit(conn: Connection) -> bool:
    driver = conn.connection.driver_connection
    return bool(getattr(driver, "autocommit", False))


#: What a claim returns of the rows it updated, for :func:`_claim_document`.
_CLAIMED_COLUMNS = (
    jobs.c.id,
    jobs.c.tenant,
    jobs.c.kind,
    jobs.c.payload,
    jobs.c.priority,
    jobs.c.attempts,
    jobs.c.max_attempts,
    jobs.c.run_at,
    jobs.c.last_error,
    jobs.c.errors,
    jobs.c.backoff,
    jobs.c.idempotency_key,
    jobs.c.created_at,
)


def _claim_document(claimed: sa.CTE) -> sa.Select[Any]:
    """The claim as one document (see :mod:`dms.jobs.wire`), read by :func:`_claim`.

    ``[started_at, lease_expires_at, rows]``: ``started_at`` and ``lease_expires_at`` are the
    claim's (``now()`` is the transaction's start, so every claimed row has these two). A row
    holds every other column of the job but those the claimant knows (``state``, ``locked_by``,
    ``finished_at``).
    """
    rows = wire.rows(
        *(
            wire.seconds(claimed.c[column.name])
            if isinstance(column.type, sa.DateTime)
            else claimed.c[column.name]
            for column in _CLAIMED_COLUMNS
        )
    )
    started_at, lease_expires_at = _lease_stamps()
    document = wire.document(wire.seconds(started_at), wire.seconds(lease_expires_at), rows)
    return sa.select(document.label("document")).select_from(claimed)


def _lease_stamps() -> tuple[sa.ColumnElement[datetime], sa.ColumnElement[datetime]]:
    """What a claim writes as ``started_at`` and ``lease_expires_at``."""
    return sa.func.now(), sa.func.now() + sa.bindparam("lease", type_=sa.Interval)


def _claimed_job(
    row: list[Any],
    worker_id: str,
    started_at: datetime,
    lease_expires_at: datetime,
    timestamps: wire.Timestamps,
) -> Job:
    """The :class:`Job` of a row of :func:`_claim_document`, as claimed by ``worker_id``."""
    (  # in the order of _CLAIMED_COLUMNS
        job_id,
        tenant,
        kind,
        payload,
        priority,
        attempts,
        max_attempts,
        run_at,
        last_error,
        errors,
        backoff,
        idempotency_key,
        created_at,
    ) = row
    return _build_job(
        {
            "id": wire.job_id(job_id),
            "tenant": tenant,
            "kind": kind,
            "payload": payload,
            "priority": priority,
            "state": _RUNNING,
            "attempts": attempts,
            "max_attempts": max_attempts,
            "run_at": timestamps(run_at),
            "locked_by": worker_id,
            "lease_expires_at": lease_expires_at,
            "last_error": last_error,
            "errors": tuple(errors),
            "backoff": None if backoff is None else Backoff.from_json(backoff),
            "idempotency_key": idempotency_key,
            "created_at": timestamps(created_at),
            "started_at": started_at,
            "finished_at": None,
        }
    )


#: Looked up once: an Enum member's attribute access runs Python code (``enum.property``).
_RUNNING = JobState.RUNNING


def _build_job(fields: dict[str, Any]) -> Job:
    """The :class:`Job` of all its fields, for the hot path.

    A frozen dataclass's ``__init__`` sets each of the 18 fields with ``object.__setattr__``:
    3.9 µs per job, a sixth of the Python time a worker spent on a no-op job (bench/README.md).
    Taking ``fields`` as the instance's ``__dict__`` costs nearly nothing and builds an equal
    object (a test compares them); the values come from a row whose types the table's columns
    fix.
    """
    job: Job = object.__new__(Job)
    object.__setattr__(job, "__dict__", fields)
    return job


@functools.cache
def _queue_order_statement() -> sa.Executable:
    """``SET LOCAL enable_sort = off``, returning the previous value.

    A materialized CTE reads the previous value before the change. The claim's only sort-free
    plan is the ordered scan of ``ix_processing_jobs_dequeue`` that stops after ``limit`` rows.
    With statistics taken while the queue was nearly empty (a fresh table, or a burst of jobs
    since the last ANALYZE) the planner otherwise picks a bitmap scan and sorts every queued row
    on each claim: 13 ms instead of 0.1 ms for 20,000 queued jobs, measured.
    ``set_config(..., is_local => true)`` ends with the transaction, so it leaves no session
    state (PgBouncer in transaction mode is fine).
    """
    previous = (
        sa.select(sa.func.current_setting("enable_sort").label("value"))
        .cte("previous")
        .prefix_with("MATERIALIZED")
    )
    return sa.select(previous.c.value, sa.func.set_config("enable_sort", "off", sa.true()))


@functools.cache
def _restore_order_statement() -> sa.Executable:
    value = sa.bindparam("value", type_=sa.Text)
    return sa.select(sa.func.set_config("enable_sort", value, sa.true()))


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
    _require_int("limit", limit, minimum=1)
    params: dict[str, Any] = {"limit": limit}
    if kinds is not None:
        params["kinds"] = list(kinds)
    rows = _conn(target).execute(_reclaim_statement(kinds is not None), params).all()
    return [_job(row) for row in rows]


def _any_of(ids: sa.ScalarSelect[Any]) -> sa.ColumnElement[Any]:
    """``ANY(ARRAY(ids))``: compared with ``id``, primary-key lookups of the selected ids."""
    return sa.any_(sa.func.array(ids))


def _of_kinds(filtered: bool) -> sa.ColumnElement[bool]:
    if not filtered:
        return sa.true()
    return jobs.c.kind == sa.any_(sa.bindparam("kinds", type_=ARRAY(sa.Text)))


def _history_entry(error: sa.ColumnElement[Any] | str) -> sa.ColumnElement[Any]:
    entry = sa.func.jsonb_build_object(
        "attempt",
        jobs.c.attempts,
        "worker",
        jobs.c.locked_by,
        "at",
        sa.func.now(),
        "error",
        error,
    )
    return jobs.c.errors.op("||")(sa.func.jsonb_build_array(entry))


def _lease_expiry_message() -> sa.ColumnElement[str]:
    return sa.func.concat(
        "lease of worker ", jobs.c.locked_by, " expired during attempt ", jobs.c.attempts
    )


@functools.cache
def _reclaim_statement(filtered: bool) -> sa.Executable:
    """``WITH expired AS (SELECT id ... FOR UPDATE SKIP LOCKED) UPDATE ... FROM expired``.

    Served by ``ix_processing_jobs_lease`` (running rows only): cheap when nothing expired.
    """
    expired = (
        sa.select(jobs.c.id)
        .where(
            jobs.c.state == JobState.RUNNING.value,
            jobs.c.lease_expires_at < sa.func.now(),
            _of_kinds(filtered),
        )
        .order_by(jobs.c.lease_expires_at)
        .limit(sa.bindparam("limit", type_=sa.Integer))
        .with_for_update(skip_locked=True)
        .cte("expired")
    )
    exhausted = jobs.c.attempts >= jobs.c.max_attempts
    return (
        sa.update(jobs)
        .where(jobs.c.id == expired.c.id)
        .values(
            state=sa.case((exhausted, JobState.DEAD.value), else_=JobState.QUEUED.value),
            finished_at=sa.case((exhausted, sa.func.now()), else_=None),
            lease_expires_at=None,
            last_error=_lease_expiry_message(),
            errors=_history_entry(_lease_expiry_message()),
        )
        .returning(*jobs.c)
    )


@functools.cache
def _claim_statement(filtered: bool) -> sa.Executable:
    """Claim up to ``:limit`` queued jobs and return them as one document.

    ``WITH claimed AS (UPDATE ... WHERE id = ANY(ARRAY(SELECT id ... LIMIT n FOR UPDATE SKIP
    LOCKED)) RETURNING *) SELECT`` the document. The hot path, kept to one index scan of
    ``ix_processing_jobs_dequeue`` (queued rows only, in claim order) and primary-key lookups:
    no expired-lease branch (see :func:`reclaim_expired`), no per-row CASE. The picked ids go
    to the update as one array, looked up in the primary key whatever the statistics say:
    joined with the table instead, a claim of 500 jobs was planned as a hash join over a
    sequential scan of the whole table (14 ms of 23 with 40,000 rows in it, growing with every
    finished job kept).
    """
    picked = (
        sa.select(jobs.c.id)
        .where(
            jobs.c.state == JobState.QUEUED.value,
            jobs.c.run_at <= sa.func.now(),
            _of_kinds(filtered),
        )
        .order_by(jobs.c.priority, jobs.c.run_at, jobs.c.id)
        .limit(sa.bindparam("limit", type_=sa.Integer))
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    started_at, lease_expires_at = _lease_stamps()
    claimed = (
        sa.update(jobs)
        .where(jobs.c.id == _any_of(picked))
        .values(
            state=JobState.RUNNING.value,
            attempts=jobs.c.attempts + 1,
            locked_by=sa.bindparam("worker_id", type_=sa.Text),
            started_at=started_at,
            lease_expires_at=lease_expires_at,
        )
        .returning(*_CLAIMED_COLUMNS)
        .cte("claimed")
    )
    return _claim_document(claimed)


# --- acknowledging (fenced) ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Completion:
    """What :func:`complete_many` did: the jobs it marked done, and those whose lease was lost."""

    completed: tuple[uuid.UUID, ...]
    lost: tuple[Job, ...]


def _fence() -> sa.ColumnElement[bool]:
    return sa.and_(
        jobs.c.id == sa.bindparam("job_id", type_=sa.Uuid),
        jobs.c.locked_by == sa.bindparam("fence_worker", type_=sa.Text),
        jobs.c.attempts == sa.bindparam("fence_attempt", type_=sa.Integer),
        jobs.c.state == JobState.RUNNING.value,
    )


def _completed_values() -> dict[str, Any]:
    return {
        "state": JobState.DONE.value,
        "lease_expires_at": None,
        "finished_at": sa.func.now(),
    }


def _failed_values() -> dict[str, Any]:
    exhausted = (jobs.c.attempts >= jobs.c.max_attempts) | sa.bindparam("give_up", type_=sa.Boolean)
    retry_at = sa.func.now() + sa.bindparam("delay", type_=sa.Interval)
    return {
        "state": sa.case((exhausted, JobState.DEAD.value), else_=JobState.QUEUED.value),
        "run_at": sa.case((exhausted, jobs.c.run_at), else_=retry_at),
        "finished_at": sa.case((exhausted, sa.func.now()), else_=None),
        "lease_expires_at": None,
        "last_error": sa.bindparam("error", type_=sa.Text),
        "errors": _history_entry(sa.bindparam("summary", type_=sa.Text)),
    }


_FENCED_VALUES: dict[str, Any] = {
    "complete": _completed_values,
    "heartbeat": lambda: {
        "lease_expires_at": sa.func.now() + sa.bindparam("lease", type_=sa.Interval)
    },
    "release": lambda: {
        "state": JobState.QUEUED.value,
        "attempts": jobs.c.attempts - 1,
        "lease_expires_at": None,
    },
    "fail": _failed_values,
}


@functools.cache
def _fenced_statement(action: str) -> sa.Executable:
    """``UPDATE ... WHERE id, locked_by, attempts match the claim``; built once per action."""
    values = _FENCED_VALUES[action]()
    return sa.update(jobs).where(_fence()).values(**values).returning(*jobs.c)


def _fenced_update(
    conn: Connection, job: Job, action: str, params: Mapping[str, Any] | None = None
) -> Job:
    fence = {"job_id": job.id, "fence_worker": job.locked_by, "fence_attempt": job.attempts}
    row = conn.execute(_fenced_statement(action), {**fence, **(params or {})}).one_or_none()
    if row is None:
        raise LeaseLost(
            f"job {job.id}: attempt {job.attempts} of worker {job.locked_by} no longer holds "
            f"the lease; {action} changed nothing"
        )
    return _job(row)


def complete(target: Executor, job: Job) -> Job:
    """Mark ``job`` done; :class:`~dms.errors.LeaseLost` if this claim no longer holds it."""
    return _fenced_update(_conn(target), job, "complete")


def complete_many(target: Executor, batch: Sequence[Job]) -> Completion:
    """Mark every job of ``batch`` done in one fenced statement; report those it could not.

    Each job is matched on its own ``(id, locked_by, attempts)``, exactly as :func:`complete`
    matches one: a job whose lease was lost (reclaimed, released, already finished) is left
    unchanged and listed in :attr:`Completion.lost`; the others are completed. Nothing is
    raised for lost leases: the caller decides. ``UPDATE ... FROM json_to_recordset(:acked)``
    (see :mod:`dms.jobs.wire`): one parameter, whatever the batch size.
    """
    # Integer ids: hashing a UUID object runs Python code.
    if len({job.id.int for job in batch}) != len(batch):
        raise ValidationError("complete_many: a job appears more than once in the batch")
    if not batch:
        return Completion(completed=(), lost=())
    acked = wire.encode(
        [
            {"position": n, "id": job.id.hex, "locked_by": job.locked_by, "attempts": job.attempts}
            for n, job in enumerate(batch, 1)
        ]
    )
    # The positions (from 1) of the completed jobs in the batch: integers decode faster than ids.
    done = _conn(target).scalars(_complete_many_statement(), {"acked": acked}).all()
    if len(done) == len(batch):
        return Completion(completed=tuple(job.id for job in batch), lost=())
    positions = set(done)
    return Completion(
        completed=tuple(job.id for n, job in enumerate(batch, 1) if n in positions),
        lost=tuple(job for n, job in enumerate(batch, 1) if n not in positions),
    )


@functools.cache
def _complete_many_statement() -> sa.Executable:
    """Complete the jobs of ``:acked`` whose fence matches; return their positions in it.

    ``UPDATE ... FROM json_to_recordset(:acked) WHERE id = ANY(ARRAY(SELECT id FROM
    json_to_recordset(:acked))) AND`` the fence of each job. The ids as an array too: they are
    looked up in the primary key whatever the statistics say (see :func:`_claim_statement`).
    """
    columns: list[tuple[str, TypeEngine[Any]]] = [
        ("position", sa.Integer()),
        ("id", sa.Uuid()),
        ("locked_by", sa.Text()),
        ("attempts", sa.Integer()),
    ]
    acked = wire.recordset("acked", columns)
    ids = wire.recordset("acked", columns)
    return (
        sa.update(jobs)
        .where(
            jobs.c.id == _any_of(sa.select(ids.c.id).scalar_subquery()),
            jobs.c.id == acked.c.id,
            jobs.c.locked_by == acked.c.locked_by,
            jobs.c.attempts == acked.c.attempts,
            # Means state = 'running' (CHECK lease_only_when_running), said so that the planner
            # cannot use the lease index, whose entries of completed jobs stay until vacuum.
            jobs.c.lease_expires_at.is_not(None),
        )
        .values(**_completed_values())
        .returning(acked.c.position)
    )


def heartbeat(
    target: Executor, job: Job, *, lease: timedelta = timedelta(seconds=LEASE_SECONDS)
) -> Job:
    """Extend the lease of ``job`` to ``lease`` from now; :class:`~dms.errors.LeaseLost` if lost."""
    validate_lease(lease)
    return _fenced_update(_conn(target), job, "heartbeat", {"lease": lease})


def release(target: Executor, job: Job) -> Job:
    """Put ``job`` back to ``queued`` without counting the attempt (for a worker shutting down)."""
    return _fenced_update(_conn(target), job, "release")


def error_text(error: str | BaseException) -> str:
    """The text recorded for ``error``: a traceback for an exception.

    At most :data:`MAX_ERROR_CHARS` characters: the end, where the exception and its frames are.
    """
    if isinstance(error, BaseException):
        error = "".join(traceback.format_exception(error)).rstrip()
    return error if len(error) <= MAX_ERROR_CHARS else "..." + error[-MAX_ERROR_CHARS:]


def _summary(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][: _MAX_NAME_CHARS * 5] if lines else ""


def fail(
    target: Executor,
    job: Job,
    error: str | BaseException,
    *,
    backoff: Backoff | None = None,
    retry: bool = True,
) -> Job:
    """Record a failed attempt of ``job``: retry later, or ``dead`` after its last attempt.

    The retry waits by the job's own backoff policy, else ``backoff`` (the kind's), else
    :data:`~dms.jobs.backoff.DEFAULT_BACKOFF`, with n = the attempt that failed. ``retry=False``
    sends the job to ``dead`` at once (an error no retry can fix). The error (a traceback for an
    exception) becomes ``last_error``; its last line is appended to ``errors``.
    """
    text = error_text(error)
    policy = job.backoff or backoff or DEFAULT_BACKOFF
    params = {
        "give_up": not retry,
        "delay": policy.delay(max(job.attempts, 1)),
        "error": text,
        "summary": _summary(text),
    }
    return _fenced_update(_conn(target), job, "fail", params)


# --- dead letter --------------------------------------------------------------------------


def _requeued_values() -> dict[str, Any]:
    return {
        "state": JobState.QUEUED.value,
        "attempts": 0,
        "run_at": sa.func.now(),
        "locked_by": None,
        "finished_at": None,
    }


def requeue_dead_letter(target: Executor, job_id: uuid.UUID) -> Job:
    """Put dead job ``job_id`` back to ``queued`` with attempts reset; its error history stays.

    Raises :class:`~dms.errors.NotFound` if there is no such job in the dead letter.
    """
    statement = (
        sa.update(jobs)
        .where(jobs.c.id == job_id, jobs.c.state == JobState.DEAD.value)
        .values(**_requeued_values())
        .returning(*jobs.c)
    )
    row = _conn(target).execute(statement).one_or_none()
    if row is None:
        raise NotFound(f"job {job_id} is not in the dead letter")
    return _job(row)


def _dead_filter(
    kind: str | None, tenant: str | None, older_than: timedelta | None
) -> sa.ColumnElement[bool]:
    clauses = [jobs.c.state == JobState.DEAD.value]
    if kind is not None:
        clauses.append(jobs.c.kind == kind)
    if tenant is not None:
        clauses.append(jobs.c.tenant == tenant)
    if older_than is not None:
        clauses.append(jobs.c.finished_at < sa.func.now() - sa.literal(older_than, sa.Interval))
    return sa.and_(*clauses)


def requeue_dead_letters(
    target: Executor,
    *,
    kind: str | None = None,
    tenant: str | None = None,
    older_than: timedelta | None = None,
) -> list[Job]:
    """Requeue every dead job matching all given filters (none: all); return the requeued jobs.

    ``older_than``: only jobs that died at least that long ago.
    """
    statement = (
        sa.update(jobs)
        .where(_dead_filter(kind, tenant, older_than))
        .values(**_requeued_values())
        .returning(*jobs.c)
    )
    return [_job(row) for row in _conn(target).execute(statement)]


def dead_letter(
    target: Executor,
    *,
    kind: str | None = None,
    tenant: str | None = None,
    older_than: timedelta | None = None,
    limit: int = 100,
) -> list[Job]:
    """Dead jobs matching all given filters, the most recently dead first."""
    statement = (
        sa.select(*jobs.c)
        .where(_dead_filter(kind, tenant, older_than))
        .order_by(jobs.c.finished_at.desc(), jobs.c.id)
        .limit(limit)
    )
    return [_job(row) for row in _conn(target).execute(statement)]


# --- inspection and housekeeping ----------------------------------------------------------


def get(target: Executor, job_id: uuid.UUID) -> Job:
    """The job ``job_id``; :class:`~dms.errors.NotFound` if it does not exist (or was pruned)."""
    row = _conn(target).execute(sa.select(*jobs.c).where(jobs.c.id == job_id)).one_or_none()
    if row is None:
        raise NotFound(f"job {job_id} does not exist")
    return _job(row)


def stats(target: Executor, *, tenant: str | None = None, kind: str | None = None) -> QueueStats:
    """Counts by tenant, kind and state, and the wait of the oldest runnable queued job."""
    conn = _conn(target)
    scope = sa.and_(
        sa.true() if tenant is None else jobs.c.tenant == tenant,
        sa.true() if kind is None else jobs.c.kind == kind,
    )
    counts = conn.execute(
        sa.select(jobs.c.tenant, jobs.c.kind, jobs.c.state, sa.func.count())
        .where(scope)
        .group_by(jobs.c.tenant, jobs.c.kind, jobs.c.state)
        .order_by(jobs.c.tenant, jobs.c.kind, jobs.c.state)
    )
    oldest = conn.scalar(
        sa.select(sa.type_coerce(sa.func.now() - sa.func.min(jobs.c.run_at), sa.Interval)).where(
            scope, jobs.c.state == JobState.QUEUED.value, jobs.c.run_at <= sa.func.now()
        )
    )
    return QueueStats(
        counts=tuple(
            StateCount(tenant=t, kind=k, state=JobState(s), count=n) for t, k, s, n in counts
        ),
        oldest_queued_age=oldest,
    )


def count_expired_leases(target: Executor, *, older_than: timedelta = timedelta(0)) -> int:
    """Running jobs whose lease expired over ``older_than`` ago and that no worker took back.

    Workers take expired leases back within a quarter lease: a count above zero for longer
    than that means no worker of those kinds is running (``dms healthcheck``).
    """
    cutoff = sa.func.now() - sa.literal(older_than, sa.Interval)
    query = sa.select(sa.func.count()).where(
        jobs.c.state == JobState.RUNNING.value, jobs.c.lease_expires_at < cutoff
    )
    return int(_conn(target).scalar(query) or 0)


def prune(
    target: Executor,
    *,
    older_than: timedelta = timedelta(days=JOB_RETENTION_DAYS),
    include_dead: bool = False,
) -> PruneResult:
    """Delete old finished jobs and expired idempotency keys; return how many of each went.

    Jobs: ``done`` (and ``dead`` with ``include_dead``) that finished over ``older_than`` ago.
    Keys: those past the retention given when they were enqueued.
    """
    conn = _conn(target)
    states = [JobState.DONE.value, *([JobState.DEAD.value] if include_dead else [])]
    cutoff = sa.func.now() - sa.literal(older_than, sa.Interval)
    pruned_jobs = conn.execute(
        sa.delete(jobs).where(jobs.c.state.in_(states), jobs.c.finished_at < cutoff)
    ).rowcount
    pruned_keys = conn.execute(
        sa.delete(ledger).where(ledger.c.expires_at < sa.func.now())
    ).rowcount
    return PruneResult(jobs=pruned_jobs, idempotency_keys=pruned_keys)


def _job(row: Row[Any]) -> Job:
    values = row._mapping
    return Job(
        id=values["id"],
        tenant=values["tenant"],
        kind=values["kind"],
        payload=values["payload"],
        priority=values["priority"],
        state=JobState(values["state"]),
        attempts=values["attempts"],
        max_attempts=values["max_attempts"],
        run_at=values["run_at"],
        locked_by=values["locked_by"],
        lease_expires_at=values["lease_expires_at"],
        last_error=values["last_error"],
        errors=tuple(values["errors"]),
        backoff=Backoff.from_json(values["backoff"]),
        idempotency_key=values["idempotency_key"],
        created_at=values["created_at"],
        started_at=values["started_at"],
        finished_at=values["finished_at"],
    )
