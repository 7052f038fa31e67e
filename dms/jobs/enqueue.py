"""Enqueueing jobs in the caller's transaction, idempotently when given a key.

A job enqueued in a unit of work that rolls back was never enqueued. With an idempotency key,
``INSERT ... ON CONFLICT DO NOTHING`` on the ledger's primary key ``(tenant, kind,
idempotency_key)`` decides: a racing enqueue waits on the unique index until the first
commits, then inserts nothing and reads the winner's job id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms import tenancy
from dms.domain.validation import shown
from dms.errors import TenantNotFound, ValidationError
from dms.jobs._driver import execute
from dms.jobs._ids import new_job_ids
from dms.jobs._statements import insert_statement
from dms.jobs._translation import TENANT_FOREIGN_KEYS, constraint_of
from dms.jobs.backoff import Backoff
from dms.jobs.executor import Executor, connection_of
from dms.jobs.tables import job_idempotency_keys as ledger
from dms.jobs.validation import (
    INT32,
    MAX_KEY_RETENTION,
    require_duration,
    require_int,
    require_json,
    require_name,
    require_run_at,
)
from dms.schema.shared import tenants

#: Attempts of a job that sets none.
DEFAULT_MAX_ATTEMPTS = 25
#: How long the ledger remembers an idempotency key after the enqueue that used it.
KEY_RETENTION_DAYS = 7


class Enqueued(NamedTuple):
    """The job an enqueue refers to, and whether this call created it."""

    job_id: uuid.UUID
    created: bool


@dataclass(frozen=True, kw_only=True)
class NewJob:
    """A job to enqueue; invalid values raise :class:`~dms.errors.ValidationError` here.

    The payload is enqueued as it was when the job was made: its JSON text, written once to
    validate it, is what the enqueue sends (a payload changed afterwards is not validated
    again, so it is not sent either).
    """

    kind: str
    payload: Any
    tenant: str
    idempotency_key: str | None = None
    run_at: datetime | None = None
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff | None = None
    _payload_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check everything that can be checked without the database."""
        tenancy.validate_slug(self.tenant)
        require_name("kind", self.kind)
        if self.idempotency_key is not None:
            require_name("idempotency_key", self.idempotency_key)
        object.__setattr__(self, "_payload_json", require_json(self.payload))
        require_int("priority", self.priority, minimum=-INT32)
        require_int("max_attempts", self.max_attempts, minimum=1)
        if self.run_at is not None:
            require_run_at(self.run_at)
        if self.backoff is not None and not isinstance(self.backoff, Backoff):
            raise ValidationError(f"backoff must be a Backoff, not {shown(self.backoff)}")


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
    _require_batch(new_jobs)
    require_duration("key_retention", key_retention, maximum=MAX_KEY_RETENTION)
    if not new_jobs:
        return []
    return _insert(connection_of(target), new_jobs, key_retention)


def _require_batch(new_jobs: object) -> None:
    if isinstance(new_jobs, str | bytes) or not isinstance(new_jobs, Sequence):
        raise ValidationError(f"new_jobs must be a sequence of NewJob, not {shown(new_jobs)}")
    for job in new_jobs:
        if not isinstance(job, NewJob):
            raise ValidationError(f"new_jobs must hold NewJob values only, not {shown(job)}")


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
        rows = execute(conn, insert_statement(keyed=keyed), params)
    except sa.exc.DBAPIError as exc:
        # Only if a tenant was dropped between the statement's check and its insert.
        if constraint_of(exc) in TENANT_FOREIGN_KEYS:
            raise TenantNotFound("a tenant of the batch was dropped meanwhile") from exc
        raise
    if not keyed:
        if rows[0][0] == len(new_jobs):
            return [Enqueued(job_id, created=True) for job_id in ids]
        require_tenants(conn, slugs)  # nothing was written: a tenant is missing
        return _insert(conn, new_jobs, key_retention)  # or it was created meanwhile
    created = {job_id for (job_id,) in rows}
    if len(created) < len(new_jobs):
        require_tenants(conn, slugs)  # keys were taken, or a tenant is missing
    results = _resolve_keys(conn, new_jobs, ids, created)
    # A key can vanish between the two statements only when it had expired and a concurrent
    # prune deleted it: it is free again, so those jobs are simply enqueued anew.
    vanished = [i for i, result in enumerate(results) if result is None]
    if vanished:
        again = iter(_insert(conn, [new_jobs[i] for i in vanished], key_retention))
        return [result if result is not None else next(again) for result in results]
    return [result for result in results if result is not None]


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc)


def require_tenants(conn: Connection, slugs: Sequence[str]) -> None:
    """Raise :class:`~dms.errors.TenantNotFound` for the first of ``slugs`` not registered."""
    query = sa.select(tenants.c.slug).where(tenants.c.slug.in_(slugs))
    missing = sorted(set(slugs) - set(conn.scalars(query)))
    if missing:
        raise TenantNotFound(f"tenant {missing[0]!r} does not exist")


def _batch_document(new_jobs: Sequence[NewJob], ids: Sequence[uuid.UUID]) -> str:
    """The batch as one JSON document: an object per job, keys of :data:`BATCH_COLUMNS`.

    Assembled from parts rather than written by ``json.dumps`` from a dict per job, which cost
    2 µs a job (a quarter of an enqueue's Python per job; 0.6 µs now): each payload is the text its
    validation wrote (:class:`NewJob`), strings go through the JSON string encoder and integers
    through ``int.__repr__`` (not what an ``int`` subclass says of itself), so that no value
    can close its own field. The options most jobs leave unset are left out (the statement's
    ``jsonb_to_recordset`` reads a missing key as NULL).
    """
    return (
        "["
        + ",".join(
            f'{{"id":"{job_id.hex}","tenant":{_string(job.tenant)},"kind":{_string(job.kind)},'
            f'"payload":{job._payload_json},"priority":{_integer(job.priority)},'
            f'"max_attempts":{_integer(job.max_attempts)}{_options(job)}}}'
            for job, job_id in zip(new_jobs, ids, strict=True)
        )
        + "]"
    )


#: A ``str`` as a JSON string (C, the function ``json.dumps`` calls for one).
_string = encode_basestring_ascii
#: An integer's digits, whatever the class of the ``int`` (a subclass may print otherwise).
_integer = int.__repr__


def _options(job: NewJob) -> str:
    """``,"run_at":...,"backoff":...,"idempotency_key":...`` for those set, else nothing."""
    options: dict[str, Any] = {}
    if job.run_at is not None:
        # In UTC: PostgreSQL takes offsets of up to ±15:59 only, Python up to ±24 h.
        options["run_at"] = _utc(job.run_at).isoformat()
    if job.backoff is not None:
        options["backoff"] = job.backoff.to_json()
    if job.idempotency_key is not None:
        options["idempotency_key"] = job.idempotency_key
    return "," + json.dumps(options, separators=(",", ":"))[1:-1] if options else ""


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
