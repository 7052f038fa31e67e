"""The audit trail sealed by the workers themselves, every tenant, without an outside cron.

Two job kinds, both among dms's own handlers (:func:`dms.processing.handlers`, so every
``dms worker`` runs them):

* ``audit.sweep`` (:data:`SWEEP_AUDIT_TRAILS`), the tick of the schedule :data:`SEAL_SCHEDULE`
  (every minute by default, ``DMS_AUDIT_SEAL_CRON``): asks each tenant for its oldest unsealed
  event (one probe of the partial index ``ix_audit_events_unsealed``) and enqueues, in its own
  unit of work, one ``audit.seal`` job per tenant that has any;
* ``audit.seal`` (:data:`SEAL_AUDIT_TRAIL`): seals one batch of one tenant's trail in the job's
  own unit of work (acting as the worker's system principal), so the batch and the job's
  completion commit together, whole or not at all; a full batch enqueues the next one.

Why jobs per tenant rather than one job sealing everyone: the fair queue then shares sealing
between tenants like any other work, a tenant with a large backlog seals batch by batch
between the others' jobs, and many workers seal many tenants at once. Each ``audit.seal`` job's
idempotency key names the oldest unsealed event it was enqueued for, so while a tenant's seal
job waits, later sweeps (and the batch before it) enqueue nothing more for that tenant.

A schedule needs a tenant (its rows, like the jobs, are dropped with theirs), and the sweep
belongs to none: it is filed under a tenant of the fleet, its *home*, and a worker that runs
the sweep re-files it under another within :data:`KEEP_SCHEDULED_SECONDS` if the home is
dropped (:func:`keep_sealing_scheduled`, called by :class:`dms.DocumentWorker` on its ticker).
Sealing by ``dms audit seal`` at the same time is harmless: sealers take turns on the chain's
head, and a batch that finds everything sealed seals nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from datetime import timedelta

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from dms import jobs, tenancy
from dms.config import settings_of
from dms.domain.validation import shown
from dms.driver_errors import UNDEFINED_TABLE, sqlstate_of
from dms.errors import TenantNotFound, ValidationError
from dms.jobs import Job, NewJob, Schedule
from dms.repositories.audit import SEAL_BATCH
from dms.uow import UnitOfWork

#: Seals one batch of one tenant's audit trail.
SEAL_AUDIT_TRAIL = "audit.seal"
#: Enqueues an ``audit.seal`` job for every tenant that has unsealed events.
SWEEP_AUDIT_TRAILS = "audit.sweep"
#: The schedule whose ticks are sweeps (``dms jobs schedules`` lists it).
SEAL_SCHEDULE = "dms.audit.seal"
#: Every minute: an unsealed event waits about a minute to be chained, at one probe per tenant.
SEAL_CRON = "* * * * *"
#: The value of ``DMS_AUDIT_SEAL_CRON`` that keeps the workers from sealing.
SEAL_OFF = "off"
#: How long a seal job's key is kept: a job that went to the dead letter holds back its
#: tenant's next one until its key expired and was pruned (``dms audit seal`` seals meanwhile).
SEAL_KEY_RETENTION = timedelta(hours=1)
#: How late a sweep may still run after its tick (one sweep covers every tick it missed).
SWEEP_CATCH_UP = timedelta(minutes=1)
#: Seconds between two checks that the sweep's schedule still exists.
KEEP_SCHEDULED_SECONDS = 10.0
#: A tenant name that passes the checks, for checking a cron expression alone.
_ANY_TENANT = "any"

_log = logging.getLogger(__name__)


def seal_job(tenant: str, oldest_unsealed: uuid.UUID) -> NewJob:
    """The ``audit.seal`` job of ``tenant``, keyed by the oldest event it has to seal."""
    return NewJob(
        kind=SEAL_AUDIT_TRAIL,
        payload={},
        tenant=tenant,
        idempotency_key=f"{SEAL_AUDIT_TRAIL}:{oldest_unsealed}",
    )


def seal_batch(uow: UnitOfWork, job: Job, /) -> None:
    """The handler of ``audit.seal``: seal one batch; a full one enqueues the next batch."""
    sealed = uow.audit.seal()
    _log.debug("job %s: sealed %d event(s) of tenant %s", job.id, sealed.count, uow.tenant)
    if sealed.count < SEAL_BATCH:
        return
    oldest = uow.audit.oldest_unsealed()
    if oldest is not None:
        jobs.enqueue_many(uow, [seal_job(uow.tenant, oldest)], key_retention=SEAL_KEY_RETENTION)


def sweep_audit_trails(uow: UnitOfWork, job: Job, /) -> None:
    """The handler of ``audit.sweep``: enqueue a seal job for each tenant with unsealed events.

    Tenants dropped during the sweep are passed over, never a reason to fail it.
    """
    engine = uow.connection.engine
    slugs = [tenant.slug for tenant in tenancy.list_tenants(uow.connection)]
    due = unsealed_tenants(engine, slugs)
    enqueued = enqueue_seals(uow, due)
    _log.debug("job %s: %d of %d tenant(s) to seal", job.id, enqueued, len(slugs))


def unsealed_tenants(engine: Engine, slugs: Iterable[str]) -> dict[str, uuid.UUID]:
    """Of ``slugs``, the tenants with unsealed events, each with its oldest one.

    One probe per tenant, each in its own unit of work (on Citus, a statement routed to the
    node holding the tenant); a tenant that does not exist (dropped meanwhile), or has no trail
    yet (registered, its schema not migrated to the audit trail), is left out. A value that is
    not a list of tenant names is refused before any SQL (:class:`~dms.errors.ValidationError`,
    :class:`~dms.errors.InvalidTenantName`).
    """
    if isinstance(slugs, str | bytes) or not isinstance(slugs, Iterable):
        raise ValidationError(f"slugs must be a list of tenant names, not {shown(slugs)}")
    names = [tenancy.validate_slug(slug) for slug in slugs]  # all refused before any SQL
    settings = settings_of(engine)
    found: dict[str, uuid.UUID] = {}
    for slug in names:
        try:
            with UnitOfWork(engine, tenant=slug, settings=settings) as uow:
                oldest = uow.audit.oldest_unsealed()
        except TenantNotFound:
            continue
        except DBAPIError as exc:
            if sqlstate_of(exc) != UNDEFINED_TABLE:
                raise
            # Registered, its schema not migrated to the audit trail yet, as in a rolling upgrade.
            _log.debug("tenant %s has no audit trail yet: not sealed", slug)
            continue
        if oldest is not None:
            found[slug] = oldest
    return found


def enqueue_seals(uow: UnitOfWork, due: dict[str, uuid.UUID]) -> int:
    """Enqueue the seal jobs of ``due`` (tenant: oldest unsealed event) in ``uow``; how many.

    A tenant dropped since it was probed refuses the whole statement, which then inserts
    nothing: the registered tenants are enqueued again without it.
    """
    remaining = dict(due)
    while remaining:
        try:
            jobs.enqueue_many(
                uow,
                [seal_job(slug, oldest) for slug, oldest in remaining.items()],
                key_retention=SEAL_KEY_RETENTION,
            )
        except TenantNotFound:
            known = tenancy.registered_slugs(uow.connection, remaining)
            remaining = {slug: remaining[slug] for slug in sorted(known)}
            continue
        return len(remaining)
    return 0


def check_seal_cron(cron: str) -> str | None:
    """``cron`` as the sweep's schedule reads it, ``None`` for :data:`SEAL_OFF`.

    Raises :class:`~dms.errors.ValidationError` naming ``DMS_AUDIT_SEAL_CRON`` for anything
    else that croniter does not read.
    """
    if cron == SEAL_OFF:
        return None
    try:
        _schedule(cron, _ANY_TENANT)
    except ValidationError as exc:
        raise ValidationError(
            f"DMS_AUDIT_SEAL_CRON must be a cron expression or {SEAL_OFF!r}, not {shown(cron)}: "
            f"{exc}"
        ) from None
    return cron


def keep_sealing_scheduled(conn: Connection, cron: str, *, replace: bool = False) -> bool:
    """Register the sweep's schedule if it is missing (or, ``replace``, not ``cron``).

    It is filed under the tenant it is under already, else the first tenant by name; with no
    tenant there is nothing to seal and nothing is registered. Runs in the caller's
    transaction; returns whether it registered. A home dropped meanwhile leaves it for the
    next call. A bad ``cron`` is a :class:`~dms.errors.ValidationError`.
    """
    _schedule(cron, _ANY_TENANT)  # a bad cron is refused before any SQL
    current = _sealing_schedule(conn)
    if current is not None and (not replace or current.cron == cron):
        return False
    home = current.tenant if current is not None else _first_tenant(conn)
    if home is None:
        return False
    try:
        jobs.register_schedules(conn, [_schedule(cron, home)])
    except TenantNotFound:
        return False
    return True


def _sealing_schedule(conn: Connection) -> Schedule | None:
    for state in jobs.list_schedules(conn):
        if state.schedule.name == SEAL_SCHEDULE:
            return state.schedule
    return None


def _first_tenant(conn: Connection) -> str | None:
    tenants: Sequence[tenancy.Tenant] = tenancy.list_tenants(conn)
    return tenants[0].slug if tenants else None


def _schedule(cron: str, home: str) -> Schedule:
    # Not zero: a tick the ticker reaches a moment late would be skipped.
    return Schedule(
        name=SEAL_SCHEDULE,
        cron=cron,
        kind=SWEEP_AUDIT_TRAILS,
        tenant=home,
        catch_up=SWEEP_CATCH_UP,
    )
