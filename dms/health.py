"""Whether a dms database is in shape: migrated, reachable, its job queue healthy.

:func:`check` answers an orchestrator's question (``dms healthcheck``): is the database
reachable, is every schema at head, does the oldest runnable job wait less than a threshold,
is every expired lease taken back, does a running worker handle every queued kind.
:func:`queue_health` gathers the figures of the queue that job-queue libraries rarely show and
that decide whether a busy queue stays fast: dead tuples
and the last (auto)vacuum of ``dms.processing_jobs``, and the oldest transaction holding back
their cleanup (a long transaction anywhere in the server keeps every dead job row alive).

Catalog and statistics views of PostgreSQL are read here (``pg_stat_user_tables``,
``pg_stat_activity``, ``pg_replication_slots``, ``pg_prepared_xacts``); the queue's own rows
are read through :mod:`dms.jobs`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms import jobs, migrations, tenancy
from dms.config import SHARED_SCHEMA
from dms.domain.audit import OPERATOR
from dms.errors import NotMigrated, StorageError
from dms.jobs import JobState
from dms.jobs.presence import live_workers, unhandled_kinds
from dms.jobs.validation import MAX_AGE, require_duration
from dms.processing import absent_sample
from dms.storage import BlobStore
from dms.uow import UnitOfWork

#: Tables of the shared schema without which nothing of dms works.
_SHARED_TABLES = ("tenants", "processing_jobs")
_QUEUE_TABLE = "processing_jobs"
#: Tenants named in a failed check; dms status lists them all.
_NAMED = 5

#: ``dms healthcheck --blobs``: tenants whose blobs are looked for in the store.
BLOB_SAMPLE_TENANTS = 10

#: ``dms healthcheck``: longest acceptable wait of the oldest runnable job, by default.
MAX_QUEUE_AGE = timedelta(minutes=5)
#: ``dms healthcheck``: how long an expired lease may stay untaken, by default. Workers take
#: expired leases back every quarter lease (7.5 s with the default lease of 30 s).
MAX_EXPIRED_LEASE = timedelta(minutes=1)


def require_migrated(conn: Connection) -> None:
    """Raise :class:`~dms.errors.NotMigrated` unless the shared schema's tables exist."""
    found = conn.execute(
        sa.select(*(sa.func.to_regclass(f"{SHARED_SCHEMA}.{name}") for name in _SHARED_TABLES))
    ).one()
    if any(table is None for table in found):
        raise NotMigrated()


@dataclass(frozen=True, kw_only=True)
class CleanupHolder:
    """What keeps VACUUM from removing dead rows: the oldest ``xmin`` still needed."""

    source: str
    """``transaction`` (a session), ``replication slot`` or ``prepared transaction``."""
    name: str
    """Who: ``pid 1234 (app, idle in transaction)``, the slot's name, the prepared gid."""
    age_xids: int
    """How many transactions old its snapshot is."""
    since: datetime | None
    """When its transaction began, where PostgreSQL says."""


@dataclass(frozen=True, kw_only=True)
class KindCount:
    """Jobs of one kind in one state, over all tenants."""

    kind: str
    state: JobState
    count: int


@dataclass(frozen=True, kw_only=True)
class QueueHealth:
    """Figures of the job queue's health."""

    counts: tuple[KindCount, ...]
    oldest_queued_age: timedelta | None
    expired_leases: int
    """Running jobs whose lease expired over :data:`MAX_EXPIRED_LEASE` ago, not taken back."""
    live_rows: int
    dead_rows: int
    """Dead tuples of ``dms.processing_jobs`` (updated or deleted rows not yet vacuumed)."""
    last_vacuum: datetime | None
    """The later of the last manual and the last automatic vacuum, if any."""
    cleanup_holder: CleanupHolder | None
    live_workers: int
    """Workers that announced themselves within :data:`~dms.jobs.presence.LIVE_WITHIN`."""
    unhandled: tuple[KindCount, ...]
    """Queued jobs, by kind, of the kinds that no live worker handles: they wait for one."""


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check of :func:`check`: its name, whether it passed, and what it saw."""

    name: str
    ok: bool
    detail: str


def check(
    engine: Engine,
    *,
    max_queue_age: timedelta = MAX_QUEUE_AGE,
    max_expired_lease: timedelta = MAX_EXPIRED_LEASE,
    store: BlobStore | None = None,
) -> list[Check]:
    """Every check of ``dms healthcheck``, in order; the first failure does not stop the rest.

    With ``store``, also whether it holds the tenants' blobs (:func:`blob_check`).

    Raises :class:`~dms.errors.ValidationError` before any SQL for a limit that is not a
    :class:`~datetime.timedelta` from zero to 100 years, and the database's error
    (:class:`~dms.errors.DatabaseUnreachable` from engines of :func:`dms.create_engine`) when it
    cannot be reached at all.
    """
    require_duration("max_queue_age", max_queue_age, maximum=MAX_AGE, zero=True)
    require_duration("max_expired_lease", max_expired_lease, maximum=MAX_AGE, zero=True)
    with engine.connect() as conn:
        conn.execute(sa.select(1))
    checks = [Check(name="database", ok=True, detail="reachable")]
    status = migrations.fleet_status(engine)
    behind = [
        t.slug for t in status.tenants if not (t.at_head and t.registered and t.schema_exists)
    ]
    shared_ok = status.shared_revision == status.head
    checks.append(
        Check(
            name="schemas",
            ok=shared_ok and not behind,
            detail=_schemas_detail(status.head, shared_ok, len(status.tenants), behind),
        )
    )
    if not shared_ok:
        return checks  # the queue's tables may not exist yet: nothing more to check
    with engine.connect() as conn:
        health = queue_health(conn, max_expired_lease=max_expired_lease)
    age = health.oldest_queued_age
    checks.append(
        Check(
            name="queue",
            ok=age is None or age <= max_queue_age,
            detail="no runnable job waits"
            if age is None
            else f"oldest runnable job waits {age.total_seconds():.1f} s "
            f"(limit {max_queue_age.total_seconds():g} s)",
        )
    )
    limit = f"{max_expired_lease.total_seconds():g} s"
    checks.append(
        Check(
            name="leases",
            ok=health.expired_leases == 0,
            detail=f"every expired lease taken back within {limit}"
            if health.expired_leases == 0
            else f"{health.expired_leases} running job(s) with a lease expired over {limit} "
            "ago: no worker takes them back",
        )
    )
    checks.append(_handlers_check(health))
    if store is not None:
        checks.append(blob_check(engine, store))
    return checks


def _handlers_check(health: QueueHealth) -> Check:
    if not health.unhandled:
        return Check(
            name="handlers",
            ok=True,
            detail=f"every queued kind has a running worker ({health.live_workers} running)",
        )
    kinds = ", ".join(f"{c.kind} ({c.count} queued)" for c in health.unhandled[:_NAMED])
    more = len(health.unhandled) - _NAMED
    return Check(
        name="handlers",
        ok=False,
        detail=f"no running worker handles {kinds}"
        + (f" and {more} more kind(s)" if more > 0 else ""),
    )


def blob_check(engine: Engine, store: BlobStore) -> Check:
    """Whether ``store`` holds the blobs of the tenants: a wrong store is found here.

    Up to :data:`BLOB_SAMPLE_TENANTS` tenants drawn at random, up to
    :data:`~dms.processing.STORE_SAMPLE` revisions of each: a tenant with revisions none of
    whose sampled blobs is in the store fails the check (one missing file is an ``Integrity``
    finding of its document, not of the store).
    """
    tenants = [t.slug for t in tenancy.list_tenants(engine)]
    sample = random.sample(tenants, min(BLOB_SAMPLE_TENANTS, len(tenants)))
    try:
        lacking = [slug for slug in sorted(sample) if not _store_holds_some(engine, store, slug)]
    except StorageError as exc:
        return Check(name="blobs", ok=False, detail=str(exc))
    if lacking:
        named = ", ".join(lacking[:_NAMED])
        return Check(
            name="blobs",
            ok=False,
            detail=f"{store.location} holds none of the sampled blobs of {len(lacking)} of "
            f"{len(sample)} tenant(s) ({named}): is it the store their files were written to?",
        )
    return Check(
        name="blobs",
        ok=True,
        detail=f"{store.location} holds the sampled blobs of {len(sample)} tenant(s)",
    )


def _store_holds_some(engine: Engine, store: BlobStore, slug: str) -> bool:
    with UnitOfWork(engine, tenant=slug, system=OPERATOR) as uow:
        return not absent_sample(uow, store)


def _schemas_detail(head: str, shared_ok: bool, tenants: int, behind: list[str]) -> str:
    if not shared_ok:
        return f"shared schema not at head {head}: run `dms migrate`"
    if behind:
        shown = ", ".join(behind[:_NAMED]) + (", ..." if len(behind) > _NAMED else "")
        return f"{len(behind)} of {tenants} tenant(s) not at head {head}: {shown} (see dms status)"
    return f"shared schema and {tenants} tenant(s) at head {head}"


def queue_health(
    conn: Connection, *, max_expired_lease: timedelta = MAX_EXPIRED_LEASE
) -> QueueHealth:
    """The queue's figures (see :class:`QueueHealth`); the shared schema must be migrated."""
    require_duration("max_expired_lease", max_expired_lease, maximum=MAX_AGE, zero=True)
    require_migrated(conn)
    stats = jobs.stats(conn)
    totals: dict[tuple[str, JobState], int] = {}
    for count in stats.counts:
        key = (count.kind, count.state)
        totals[key] = totals.get(key, 0) + count.count
    live, dead, vacuumed = _table_statistics(conn)
    workers = live_workers(conn)
    queued = {kind: n for (kind, state), n in totals.items() if state is JobState.QUEUED}
    return QueueHealth(
        counts=tuple(
            KindCount(kind=kind, state=state, count=n)
            for (kind, state), n in sorted(totals.items())
        ),
        oldest_queued_age=stats.oldest_queued_age,
        expired_leases=jobs.count_expired_leases(conn, older_than=max_expired_lease),
        live_rows=live,
        dead_rows=dead,
        last_vacuum=vacuumed,
        cleanup_holder=_cleanup_holder(conn),
        live_workers=len(workers),
        unhandled=tuple(
            KindCount(kind=kind, state=JobState.QUEUED, count=n)
            for kind, n in unhandled_kinds(queued, workers).items()
        ),
    )


def _table_statistics(conn: Connection) -> tuple[int, int, datetime | None]:
    stats = sa.table(
        "pg_stat_user_tables",
        sa.column("schemaname"),
        sa.column("relname"),
        sa.column("n_live_tup"),
        sa.column("n_dead_tup"),
        sa.column("last_vacuum", sa.DateTime(timezone=True)),
        sa.column("last_autovacuum", sa.DateTime(timezone=True)),
    )
    row = conn.execute(
        sa.select(
            stats.c.n_live_tup,
            stats.c.n_dead_tup,
            sa.func.greatest(stats.c.last_vacuum, stats.c.last_autovacuum),
        ).where(stats.c.schemaname == SHARED_SCHEMA, stats.c.relname == _QUEUE_TABLE)
    ).one()
    return int(row[0]), int(row[1]), row[2]


def _cleanup_holder(conn: Connection) -> CleanupHolder | None:
    """The oldest snapshot the server keeps dead rows for, of sessions, slots and 2PC."""
    activity = sa.table(
        "pg_stat_activity",
        sa.column("pid"),
        sa.column("application_name"),
        sa.column("state"),
        sa.column("backend_xmin"),
        sa.column("xact_start", sa.DateTime(timezone=True)),
    )
    slots = sa.table("pg_replication_slots", sa.column("slot_name"), sa.column("xmin"))
    prepared = sa.table(
        "pg_prepared_xacts",
        sa.column("gid"),
        sa.column("transaction"),
        sa.column("prepared", sa.DateTime(timezone=True)),
    )
    holders = sa.union_all(
        sa.select(
            sa.literal("transaction").label("source"),
            sa.func.concat(
                "pid ",
                activity.c.pid,
                " (",
                sa.func.concat_ws(
                    ", ", sa.func.nullif(activity.c.application_name, ""), activity.c.state
                ),
                ")",
            ).label("name"),
            sa.func.age(activity.c.backend_xmin).label("age_xids"),
            activity.c.xact_start.label("since"),
        ).where(activity.c.backend_xmin.is_not(None), activity.c.pid != sa.func.pg_backend_pid()),
        sa.select(
            sa.literal("replication slot"),
            slots.c.slot_name,
            sa.func.age(slots.c.xmin),
            sa.null(),
        ).where(slots.c.xmin.is_not(None)),
        sa.select(
            sa.literal("prepared transaction"),
            prepared.c.gid,
            sa.func.age(prepared.c.transaction),
            prepared.c.prepared,
        ),
    ).subquery()
    row = conn.execute(sa.select(holders).order_by(holders.c.age_xids.desc()).limit(1)).first()
    if row is None:
        return None
    return CleanupHolder(
        source=row.source, name=row.name, age_xids=int(row.age_xids), since=row.since
    )
