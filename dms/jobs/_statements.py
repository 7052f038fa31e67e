"""Every statement on the job queue's tables, as Core expressions, built once where possible.

The queue tables live in the shared schema ``dms`` and are declared with that schema
explicitly, so a tenant-routed connection reaches them unchanged. Concurrency rests on
PostgreSQL alone:

* **idempotent enqueue**: ``INSERT ... ON CONFLICT DO NOTHING`` on the ledger's primary key;
* **claims**: ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT n`` feeding ``UPDATE ... RETURNING`` in
  one statement;
* **reclaims**: a separate statement puts ``running`` jobs whose lease expired back to
  ``queued`` (or ``dead``), so the hot claim only ever scans queued rows;
* **fencing**: an acknowledgement matches ``(id, locked_by, attempts, state = 'running')``.

Transactions are expected at READ COMMITTED (PostgreSQL's default).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert
from sqlalchemy.types import TypeEngine

from dms.jobs import _wire as wire
from dms.jobs.model import CANCELLABLE_STATES, JobState
from dms.jobs.tables import job_idempotency_keys as ledger
from dms.jobs.tables import job_limits as limits
from dms.jobs.tables import job_schedules, job_workers
from dms.jobs.tables import processing_jobs as jobs
from dms.schema.recordsets import recordset
from dms.schema.shared import tenants

#: The LISTEN/NOTIFY channel on which enqueue wakes workers up.
NOTIFY_CHANNEL = "dms_jobs"


def tenants_known() -> sa.ColumnElement[bool]:
    """Every tenant of the batch (``:slugs``, a JSON array of them, each once) is registered.

    Evaluated once per statement, it also wakes listening workers: ``pg_notify`` once per known
    tenant (PostgreSQL folds repeated notifications), delivered when the caller commits, so
    never before the jobs can be seen. A statement whose tenants are not all known inserts
    nothing, and the caller's transaction stays usable.

    The slugs come as JSON text, as the batch does, and are counted here: psycopg dumps a
    ``str`` at once, where a ``list`` for ``text[]`` and an ``int`` for their count each cost
    it a search for the right dumper, per call (bench/README.md).
    """
    given = sa.cast(sa.bindparam("slugs", type_=sa.Text), JSONB)
    slugs = sa.func.array(sa.select(sa.func.jsonb_array_elements_text(given)).scalar_subquery())
    # The channel and the empty message as literals in the text: two parameters fewer to send.
    channel = sa.literal_column(f"'{NOTIFY_CHANNEL}'", sa.Text)
    message = sa.literal_column("''", sa.Text)
    notified = (
        sa.select(sa.func.pg_notify(channel, message))
        .where(tenants.c.slug == sa.any_(slugs))
        .subquery("notified")
    )
    found = sa.select(sa.func.count()).select_from(notified).scalar_subquery()
    return found == sa.func.jsonb_array_length(given)


#: Columns of an enqueued batch, one object per job in one document (see :mod:`._wire`): the
#: statement's text does not depend on the batch size, so it is prepared once per connection
#: and has no parameter-count limit.
BATCH_COLUMNS: tuple[tuple[str, TypeEngine[Any]], ...] = (
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


@functools.cache
def insert_statement(*, keyed: bool) -> sa.Executable:
    """Insert the jobs of a batch; ``keyed``: only those whose key the ledger did not hold.

    ``WITH inserted AS (INSERT INTO processing_jobs SELECT ... FROM jsonb_to_recordset(:batch)
    WHERE`` the tenants are known (:func:`tenants_known`) ``RETURNING id) SELECT count(*)
    FROM inserted``, or with keys: ``WITH batch AS (SELECT ...
    WHERE`` the tenants are known ``), claimed_keys AS (INSERT INTO ledger SELECT ... FROM batch
    WHERE key IS NOT NULL ON CONFLICT DO NOTHING RETURNING job_id) INSERT INTO processing_jobs
    SELECT ... FROM batch WHERE key IS NULL OR id IN claimed_keys RETURNING id``.
    """
    given = recordset("batch", BATCH_COLUMNS, jsonb=True)
    columns = [name for name, _ in BATCH_COLUMNS]
    if not keyed:
        rows = new_rows(given).where(tenants_known())
        inserted = insert(jobs).from_select(columns, rows).returning(jobs.c.id).cte("inserted")
        return sa.select(sa.func.count()).select_from(inserted)
    batch = sa.select(given).where(tenants_known()).cte("batch")
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
    statement = insert(jobs).from_select(columns, new_rows(batch).where(free))
    # A data-modifying WITH must sit at the top of the statement.
    statement = statement.add_cte(batch, nest_here=True).add_cte(claimed_keys, nest_here=True)
    return statement.returning(jobs.c.id)


def new_rows(batch: sa.FromClause) -> sa.Select[Any]:
    """The rows of ``batch`` in the order of :data:`BATCH_COLUMNS`, defaults applied."""
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


@functools.cache
def claimer_settings_statement() -> sa.Executable:
    """For this transaction: :data:`QUEUE_ORDER_SETTINGS` off, commit without waiting for WAL.

    The settings: see :func:`queue_order_statement`. Asynchronous commit is safe
    for a claim alone: a claim lost in a server crash leaves its jobs ``queued`` (claimed again,
    no attempt counted), and the claimant's fenced acknowledgement then matches nothing;
    PostgreSQL flushes WAL in order, so any later durable commit (a completion) makes the claim
    durable first.
    """
    return sa.select(
        *_queue_order_settings(),
        sa.func.set_config("synchronous_commit", "off", sa.true()),
    )


CLAIMED_COLUMNS = (
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


def claim_document(
    claimed: sa.CTE, limited_walked: sa.ColumnElement[bool], limits_exist: sa.ColumnElement[bool]
) -> sa.Select[Any]:
    """The claim as one document (see :mod:`dms.jobs._wire`), read by :func:`_claim`.

    ``[started_at, lease_expires_at, rows, limited, limits]``: ``started_at`` and
    ``lease_expires_at`` are the claim's (``now()`` is the transaction's start, so every claimed
    row has these two). A row holds every other column of the job but those the claimant knows
    (``state``, ``locked_by``, ``finished_at``). ``limited``: whether the claim walked a tenant
    with limits; ``limits``: whether any tenant has limits.
    """
    rows = wire.rows(
        *(
            wire.seconds(claimed.c[column.name])
            if isinstance(column.type, sa.DateTime)
            else claimed.c[column.name]
            for column in CLAIMED_COLUMNS
        )
    )
    started_at, lease_expires_at = lease_stamps()
    document = wire.document(
        wire.seconds(started_at), wire.seconds(lease_expires_at), rows, limited_walked, limits_exist
    )
    return sa.select(document.label("document")).select_from(claimed)


def lease_stamps() -> tuple[sa.ColumnElement[datetime], sa.ColumnElement[datetime]]:
    """What a claim writes as ``started_at`` and ``lease_expires_at``."""
    return sa.func.now(), sa.func.now() + sa.bindparam("lease", type_=sa.Interval)


#: What a claim's transaction turns off (see :func:`queue_order_statement`).
QUEUE_ORDER_SETTINGS = ("enable_sort", "enable_bitmapscan", "jit")


def _queue_order_settings() -> tuple[sa.ColumnElement[str], ...]:
    return tuple(sa.func.set_config(name, "off", sa.true()) for name in QUEUE_ORDER_SETTINGS)


@functools.cache
def queue_order_statement() -> sa.Executable:
    """``SET LOCAL enable_sort = off, enable_bitmapscan = off, jit = off``; the previous values.

    A materialized CTE reads the previous values before the change. The claim's only sort-free
    plan is the ordered scan of ``ix_processing_jobs_claim`` that stops after ``limit`` rows.
    With statistics taken while the queue was nearly empty (a fresh table, or a burst of jobs
    since the last ANALYZE) the planner otherwise picks a bitmap scan and sorts every queued row
    on each claim: 13 ms instead of 0.1 ms for 20,000 queued jobs, measured.
    ``set_config(..., is_local => true)`` ends with the transaction, so it leaves no session
    state (PgBouncer in transaction mode is fine).

    ``enable_bitmapscan`` off: every job leaves index entries behind in its tenant's range of
    ``ix_processing_jobs_tenant_state`` (as ``running``) and in the queue index, dead once it
    moves on, until VACUUM removes them. An index scan skips the entries an earlier scan found
    dead (PostgreSQL marks them); a bitmap scan returns them all and visits their heap rows:
    counting a limited tenant's running jobs after 200,000 of its jobs went through read
    104,000 dead entries (24 ms of each claim, measured) as a bitmap.

    ``jit`` off: the per-kind limits of a claim sort its few rows (a window function), and with
    sorts disabled that sort costs the planner's "disabled" penalty, far above
    ``jit_above_cost``: compiling the claim then took 0.9 s, measured, for a 1 ms statement.
    """
    previous = (
        sa.select(*(sa.func.current_setting(name).label(name) for name in QUEUE_ORDER_SETTINGS))
        .cte("previous")
        .prefix_with("MATERIALIZED")
    )
    return sa.select(*previous.c, *_queue_order_settings())


@functools.cache
def restore_order_statement() -> sa.Executable:
    """Set :data:`QUEUE_ORDER_SETTINGS` back to the parameters named after them (transaction)."""
    return sa.select(
        *(
            sa.func.set_config(name, sa.bindparam(name, type_=sa.Text), sa.true())
            for name in QUEUE_ORDER_SETTINGS
        )
    )


def any_of(ids: sa.ScalarSelect[Any]) -> sa.ColumnElement[Any]:
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
def reclaim_statement(filtered: bool) -> sa.Executable:
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
def release_unheld_statement() -> sa.Executable:
    """Give back the ``running`` jobs of ``:worker_id`` whose ids are not in ``:held``.

    As a release does: ``queued`` again, the attempt not counted. A worker's own jobs it lost
    track of (see :func:`dms.jobs.claims.release_unheld`); served by
    ``ix_processing_jobs_lease`` (running rows only).
    """
    held = sa.bindparam("held", type_=ARRAY(sa.Uuid))
    return (
        sa.update(jobs)
        .where(
            jobs.c.state == JobState.RUNNING.value,
            jobs.c.locked_by == sa.bindparam("worker_id", type_=sa.Text),
            sa.not_(jobs.c.id == sa.any_(held)),
        )
        .values(state=JobState.QUEUED.value, attempts=jobs.c.attempts - 1, lease_expires_at=None)
        .returning(*jobs.c)
    )


@functools.cache
def claim_statement(filtered: bool, limited: bool = True) -> sa.Executable:
    """Claim up to ``:limit`` queued jobs, shared between tenants, and return them as one document.

    Fair between tenants and within their limits, in one statement:

    1. **walk** the tenants that have runnable jobs, in name order after ``:after_tenant`` and
       on from the first one past the last, at most ``:tenants`` of them (:func:`_walk`): a
       recursive CTE that probes ``ix_processing_jobs_claim`` (queued rows by tenant) once per
       tenant, whatever each one's backlog;
    2. **share**: from each tenant walked, its first ``ceil(:limit / tenants walked)`` runnable
       jobs in its own order (``priority``, then ``run_at``), ``FOR UPDATE SKIP LOCKED`` in a
       lateral subquery on the same index, at most ``:limit`` in all; a tenant with limits
       (``dms.job_limits``) gets no more than they allow now (:func:`_allowances`), and nothing
       unless :func:`lock_limits_statement` took its lock earlier in the transaction;
    3. **claim** them: ``UPDATE ... WHERE id = ANY(ARRAY(...)) RETURNING``, primary-key lookups
       whatever the statistics say (joined with the table instead, a claim of 500 jobs was
       planned as a hash join over a sequential scan of the whole table), and spend the rate
       limits' tokens.

    A tenant with 200,000 jobs and one with a single job each get half of a claim; alone, a
    tenant gets all of it. The caller passes the last tenant of a full walk as the next
    ``:after_tenant`` (:func:`dms.jobs.claims.next_after`), so with more tenants than one walk
    visits, the claims go round all of them. Priority orders jobs within a tenant, not between
    tenants. No expired-lease branch (see :func:`reclaim_expired`).

    The document (:func:`claim_document`) says too whether a limited tenant was walked: then
    the claim may have been held back by a limit rather than by an empty queue.
    """
    ready = _ready(jobs, filtered)
    after = sa.bindparam("after_tenant", type_=sa.Text)
    walk = _walk(filtered, after)
    visited = (
        sa.select(walk.c.tenant)
        .where(walk.c.tenant.is_not(None), sa.or_(~walk.c.wrapped, walk.c.tenant <= after))
        .cte("visited")
    )
    limit = sa.bindparam("limit", type_=sa.Integer)
    share = (
        sa.select(sa.cast(sa.func.ceil(sa.cast(limit, sa.Numeric) / sa.func.count()), sa.Integer))
        .select_from(visited)
        .scalar_subquery()
    )
    is_limited = sa.exists().where(limits.c.tenant == visited.c.tenant).correlate_except(limits)
    own = sa.select(jobs.c.id, jobs.c.kind, jobs.c.priority, jobs.c.run_at).where(
        jobs.c.tenant == visited.c.tenant, ready
    )
    if limited:
        held = _held_limits()
        allowances = _allowances(held)
        own = own.where(_not_spent(jobs.c.kind, _spent_kinds(allowances, visited.c.tenant)))
        most = _tenant_share(visited.c.tenant, share, held, allowances)
    else:  # none of a limited tenant's jobs: only a claim that took its lock may count them
        most = sa.case((is_limited, 0), else_=share)
    taken = own.order_by(*_QUEUE_ORDER).limit(most).with_for_update(skip_locked=True).lateral("own")
    picked = (
        _within_kind_limits(visited, taken, allowances, limit)
        if limited
        else sa.select(taken.c.id).select_from(visited.join(taken, sa.true())).limit(limit)
    )
    started_at, lease_expires_at = lease_stamps()
    claimed = (
        sa.update(jobs)
        .where(jobs.c.id == any_of(picked.scalar_subquery()))
        .values(
            state=JobState.RUNNING.value,
            attempts=jobs.c.attempts + 1,
            locked_by=sa.bindparam("worker_id", type_=sa.Text),
            started_at=started_at,
            lease_expires_at=lease_expires_at,
        )
        .returning(*CLAIMED_COLUMNS)
        .cte("claimed")
    )
    limited_walked = sa.exists().where(
        limits.c.tenant == sa.any_(sa.func.array(sa.select(visited.c.tenant).scalar_subquery()))
    )
    document = claim_document(claimed, limited_walked, sa.exists(sa.select(limits.c.tenant)))
    return document.add_cte(_spend_tokens(claimed)) if limited else document


_QUEUE_ORDER = (jobs.c.priority, jobs.c.run_at, jobs.c.id)


# --- limits in the claim (dms.jobs.limits) ----------------------------------------------------

#: The transaction-local setting through which :func:`lock_limits_statement` tells the claim
#: after it which limited tenants' locks it holds.
HELD_LIMITS_SETTING = "dms.claim_held_limits"
#: The first key of the advisory locks that serialise claims of a limited tenant.
_LIMITS_LOCK = "dms.job_limits"


@functools.cache
def lock_limits_statement(filtered: bool) -> sa.Executable:
    """Lock the limited tenants that have runnable jobs, those no other claim holds.

    A transaction-level advisory lock per tenant, taken with ``pg_try_advisory_xact_lock`` (a
    tenant another claim holds is skipped, never waited for), and the tenants held written to
    :data:`HELD_LIMITS_SETTING` for :func:`claim_statement`. It must be a statement of its
    own, before the claim: at READ COMMITTED the claim's snapshot is then taken after the lock,
    so it counts every job the previous holder claimed and committed. A tenant's claims are
    serialised this way, nobody else's.
    """
    later = jobs.alias("runnable")
    # A tenant's first runnable job in queue order, not EXISTS: the planner turned EXISTS into
    # a hash semi join over every queued row (104 ms behind a backlog of 178,000, measured);
    # ordered on ix_processing_jobs_claim with LIMIT 1 it is one index probe per limit row.
    first_ready = (
        sa.select(later.c.id)
        .where(later.c.tenant == limits.c.tenant, _ready(later, filtered))
        .order_by(later.c.tenant, later.c.priority, later.c.run_at, later.c.id)
        .limit(1)
        .scalar_subquery()
    )
    limited = (
        sa.select(limits.c.tenant)
        .distinct()
        .where(first_ready.is_not(None))
        .cte("limited")
        .prefix_with("MATERIALIZED")  # the lock below runs once per tenant, never pushed down
    )
    locked = (
        sa.select(limited.c.tenant)
        .where(
            sa.func.pg_try_advisory_xact_lock(
                sa.func.hashtext(_LIMITS_LOCK), sa.func.hashtext(limited.c.tenant)
            )
        )
        .subquery("locked")
    )
    tenants = sa.func.coalesce(sa.cast(sa.func.array_agg(locked.c.tenant), sa.Text), "{}")
    return sa.select(sa.func.set_config(HELD_LIMITS_SETTING, tenants, sa.true())).select_from(
        locked
    )


def _held_limits() -> sa.ColumnElement[Any]:
    """The tenants :func:`lock_limits_statement` locked in this transaction, as ``text[]``.

    ``current_setting(..., missing_ok)`` is ``NULL`` in a session that never set it and ``''``
    after a transaction that did: both are none.
    """
    setting = sa.func.current_setting(HELD_LIMITS_SETTING, sa.true())
    return sa.cast(sa.func.coalesce(sa.func.nullif(setting, ""), "{}"), ARRAY(sa.Text))


def available_tokens(limit: sa.FromClause) -> sa.ColumnElement[float]:
    """A rate limit's tokens now: refilled at ``per_second`` since ``tokens_at``, up to a second's.

    A second's worth, at least one job: ``per_second = 0.5`` starts one job every two seconds,
    ``per_second = 100`` up to 100 at once after a quiet second. ``statement_timestamp()``,
    not ``now()``: a claim's transaction may have begun before the previous holder of the
    tenant's lock spent its tokens.
    """
    elapsed = sa.func.greatest(
        0.0, sa.func.date_part("epoch", sa.func.statement_timestamp() - limit.c.tokens_at)
    )
    return sa.func.least(
        sa.func.greatest(1.0, limit.c.per_second),
        limit.c.tokens + limit.c.per_second * elapsed,
    )


def _allowances(held: sa.ColumnElement[Any]) -> sa.CTE:
    """How many more jobs each limit of a held tenant lets start now (``NULL``: no limit).

    The lesser of ``max_running`` less the jobs running (of the tenant, or of the tenant's
    kind) and the whole tokens of the rate limit. A range of each held tenant's running rows
    (``ix_processing_jobs_tenant_state``), whatever its finished jobs or other tenants' running
    ones.
    """
    counted = _running_under(limits)
    by_running = sa.case(
        (limits.c.max_running.is_not(None), limits.c.max_running - counted), else_=None
    )
    by_rate = sa.case(
        (limits.c.per_second.is_not(None), sa.func.floor(available_tokens(limits))), else_=None
    )
    return (
        sa.select(
            limits.c.tenant,
            limits.c.kind,
            sa.cast(sa.func.least(by_running, by_rate), sa.Integer).label("allowed"),
        )
        .where(limits.c.tenant == sa.any_(held))
        .cte("allowances")
        .prefix_with("MATERIALIZED")
    )


def _running_under(limit: sa.Table) -> sa.ScalarSelect[int]:
    """The jobs ``running`` that a row of ``limit`` counts: its tenant's, of its kind or any."""
    running = jobs.alias("running")
    return (
        sa.select(sa.func.count())
        .where(
            running.c.state == JobState.RUNNING.value,
            running.c.tenant == limit.c.tenant,
            sa.or_(limit.c.kind == "", running.c.kind == limit.c.kind),
        )
        .scalar_subquery()
    )


def _tenant_share(
    tenant: sa.ColumnElement[str],
    share: sa.ScalarSelect[int],
    held: sa.ColumnElement[Any],
    allowances: sa.CTE,
) -> sa.ColumnElement[int]:
    """How many jobs the claim takes of ``tenant`` at most: its share, within its limits."""
    # Correlated with the walk two levels up, as in _walk: SQLAlchemy looks one level up only.
    limited = sa.exists().where(limits.c.tenant == tenant).correlate_except(limits)
    whole = (
        sa.select(allowances.c.allowed)
        .where(allowances.c.tenant == tenant, allowances.c.kind == "")
        .correlate_except(allowances)
        .scalar_subquery()
    )
    return sa.case(
        (~limited, share),
        (sa.not_(tenant == sa.any_(held)), 0),  # another claim holds it, or it is new: not now
        else_=sa.func.greatest(0, sa.func.least(share, sa.func.coalesce(whole, share))),
    )


def _spent_kinds(allowances: sa.CTE, tenant: sa.ColumnElement[str]) -> sa.ColumnElement[Any]:
    """The kinds of ``tenant`` whose limit lets none start now: the claim skips their jobs."""
    spent = (
        sa.select(allowances.c.kind)
        .where(allowances.c.tenant == tenant, allowances.c.kind != "", allowances.c.allowed <= 0)
        .correlate_except(allowances)
    )
    return sa.func.array(spent.scalar_subquery())


def _not_spent(kind: sa.ColumnElement[str], spent: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    """``kind`` is none of ``spent``, written so that the planner cannot read it.

    As ``kind <> ALL(spent)``, the planner estimates from the column's statistics: with one
    kind queued, no row at all, and it sorts every queued row of the tenant instead of reading
    the queue index in order. A ``CASE`` gets a neutral guess.
    """
    return sa.case((sa.func.cardinality(spent) == 0, sa.true()), else_=kind != sa.all_(spent))


def _within_kind_limits(
    visited: sa.CTE, own: sa.FromClause, allowances: sa.CTE, limit: sa.BindParameter[int]
) -> sa.Select[Any]:
    """The ids of the jobs taken, with no more of a limited kind than its allowance."""
    taken = (
        sa.select(
            own.c.id,
            visited.c.tenant,
            own.c.kind,
            sa.func.row_number()
            .over(
                partition_by=(visited.c.tenant, own.c.kind),
                order_by=(own.c.priority, own.c.run_at, own.c.id),
            )
            .label("nth"),
        )
        .select_from(visited.join(own, sa.true()))
        .subquery("taken")
    )
    return (
        sa.select(taken.c.id)
        .select_from(
            taken.outerjoin(
                allowances,
                sa.and_(allowances.c.tenant == taken.c.tenant, allowances.c.kind == taken.c.kind),
            )
        )
        .where(sa.or_(allowances.c.allowed.is_(None), taken.c.nth <= allowances.c.allowed))
        .limit(limit)
    )


def _spend_tokens(claimed: sa.CTE) -> sa.CTE:
    """Take the claimed jobs out of their tenants' rate limits (rows of tenants claimed from)."""
    spent = (
        sa.select(sa.func.count())
        .where(
            claimed.c.tenant == limits.c.tenant,
            sa.or_(limits.c.kind == "", claimed.c.kind == limits.c.kind),
        )
        .scalar_subquery()
    )
    return (
        sa.update(limits)
        .where(
            limits.c.per_second.is_not(None),
            limits.c.tenant
            == sa.any_(sa.func.array(sa.select(claimed.c.tenant).scalar_subquery())),
        )
        .values(tokens=available_tokens(limits) - spent, tokens_at=sa.func.statement_timestamp())
        .cte("spent")
    )


def _walk(filtered: bool, after: sa.BindParameter[str]) -> sa.CTE:
    """The tenants with runnable jobs after ``after``, then (``wrapped``) from the first one.

    ``WITH RECURSIVE walk(tenant, step, wrapped)``: each step is one probe of
    ``ix_processing_jobs_claim`` for the next tenant; past the last one the walk goes on from
    the first tenant, and stops at ``:tenants`` steps or where it started.
    """

    def first_after(bound: sa.ColumnElement[str]) -> sa.ScalarSelect[str]:
        later = jobs.alias()
        return (
            sa.select(later.c.tenant)
            .where(_ready(later, filtered), later.c.tenant > bound)
            .order_by(later.c.tenant, later.c.priority, later.c.run_at, later.c.id)
            .limit(1)
            .correlate_except(later)  # ``bound`` may be the walk's column, two levels up
            .scalar_subquery()
        )

    first = sa.literal("", sa.Text)
    start = sa.select(first_after(after).label("tenant")).subquery("start")
    walk = sa.select(
        sa.func.coalesce(start.c.tenant, first_after(first)).label("tenant"),
        sa.literal(1).label("step"),
        start.c.tenant.is_(None).label("wrapped"),
    ).cte("walk", recursive=True)
    following = sa.select(first_after(walk.c.tenant).label("tenant")).lateral("following")
    return walk.union_all(
        sa.select(
            sa.case(
                (following.c.tenant.is_not(None), following.c.tenant),
                (~walk.c.wrapped, first_after(first)),
            ),
            walk.c.step + 1,
            walk.c.wrapped | following.c.tenant.is_(None),
        )
        .select_from(walk.join(following, sa.true()))
        .where(
            walk.c.tenant.is_not(None),
            walk.c.step < sa.bindparam("tenants", type_=sa.Integer),
            ~(walk.c.wrapped & (walk.c.tenant >= after)),
        )
    )


def _ready(table: sa.FromClause, filtered: bool) -> sa.ColumnElement[bool]:
    """Runnable rows of ``table`` (of ``:kinds`` when ``filtered``)."""
    condition = sa.and_(table.c.state == JobState.QUEUED.value, table.c.run_at <= sa.func.now())
    if filtered:
        condition = sa.and_(
            condition, table.c.kind == sa.any_(sa.bindparam("kinds", type_=ARRAY(sa.Text)))
        )
    return condition


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
def fenced_statement(action: str) -> sa.Executable:
    """``UPDATE ... WHERE id, locked_by, attempts match the claim``; built once per action."""
    values = _FENCED_VALUES[action]()
    return sa.update(jobs).where(_fence()).values(**values).returning(*jobs.c)


@functools.cache
def complete_many_statement() -> sa.Executable:
    """Complete the jobs of ``:acked`` whose fence matches; return their positions in it.

    ``UPDATE ... FROM json_to_recordset(:acked) WHERE id = ANY(ARRAY(SELECT id FROM
    json_to_recordset(:acked))) AND`` the fence of each job. The ids as an array too: they are
    looked up in the primary key whatever the statistics say (see :func:`claim_statement`).
    """
    columns: list[tuple[str, TypeEngine[Any]]] = [
        ("position", sa.Integer()),
        ("id", sa.Uuid()),
        ("locked_by", sa.Text()),
        ("attempts", sa.Integer()),
    ]
    acked = recordset("acked", columns)
    ids = recordset("acked", columns)
    return (
        sa.update(jobs)
        .where(
            jobs.c.id == any_of(sa.select(ids.c.id).scalar_subquery()),
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


def requeued_values() -> dict[str, Any]:
    """What a requeue writes: ``queued`` now, attempts reset."""
    return {
        "state": JobState.QUEUED.value,
        "attempts": 0,
        "run_at": sa.func.now(),
        "locked_by": None,
        "finished_at": None,
    }


def _in_states(
    states: Sequence[str],
    kind: str | None,
    tenant: str | None,
    older_than: timedelta | None,
    since: sa.ColumnElement[datetime],
) -> sa.ColumnElement[bool]:
    """Jobs in ``states`` matching every filter given (``None``: any), aged from ``since``."""
    clauses: list[sa.ColumnElement[bool]] = [jobs.c.state.in_(states)]
    if kind is not None:
        clauses.append(jobs.c.kind == kind)
    if tenant is not None:
        clauses.append(jobs.c.tenant == tenant)
    if older_than is not None:
        clauses.append(since < sa.func.now() - sa.literal(older_than, sa.Interval))
    return sa.and_(*clauses)


def dead_filter(
    kind: str | None, tenant: str | None, older_than: timedelta | None
) -> sa.ColumnElement[bool]:
    """Dead jobs matching every filter given (``None``: any); ``older_than``: dead that long."""
    return _in_states([JobState.DEAD.value], kind, tenant, older_than, jobs.c.finished_at)


#: What cancelling writes: a running job's lease ends here, so its worker's fenced settlement
#: (which matches ``state = 'running'``) changes nothing from now on. ``locked_by`` stays, to
#: say who ran it.
_CANCELLED = {
    "state": JobState.CANCELLED.value,
    "lease_expires_at": None,
    "finished_at": sa.func.now(),
}


@functools.cache
def cancel_statement() -> sa.Executable:
    """Cancel ``:job_id`` unless it is done or cancelled already; return the row if it was."""
    return (
        sa.update(jobs)
        .where(
            jobs.c.id == sa.bindparam("job_id", type_=sa.Uuid),
            jobs.c.state.in_(CANCELLABLE_STATES),
        )
        .values(_CANCELLED)
        .returning(*jobs.c)
    )


def unfinished_filter(
    states: Sequence[str], kind: str | None, tenant: str | None, older_than: timedelta | None
) -> sa.ColumnElement[bool]:
    """Jobs in ``states`` (cancellable ones) matching every filter given (``None``: any).

    ``older_than``: created at least that long ago.
    """
    return _in_states(states, kind, tenant, older_than, jobs.c.created_at)


def cancel_matching_statement(matching: sa.ColumnElement[bool]) -> sa.Executable:
    """Cancel every job ``matching`` (as :func:`cancel_statement` one); return their rows."""
    return (
        sa.update(jobs)
        .where(matching, jobs.c.state.in_(CANCELLABLE_STATES))
        .values(_CANCELLED)
        .returning(*jobs.c)
    )


def list_statement(
    state: JobState | None, tenant: str | None, kind: str | None, limit: int
) -> sa.Select[Any]:
    """Jobs matching every filter given (``None``: any), the most recently created first."""
    clauses = [
        column == value
        for column, value in (
            (jobs.c.state, None if state is None else state.value),
            (jobs.c.tenant, tenant),
            (jobs.c.kind, kind),
        )
        if value is not None
    ]
    return (
        sa.select(*jobs.c)
        .where(sa.and_(sa.true(), *clauses))
        .order_by(jobs.c.created_at.desc(), jobs.c.id.desc())
        .limit(limit)
    )


@functools.cache
def get_statement() -> sa.Executable:
    """The job ``:job_id``, every column."""
    return sa.select(*jobs.c).where(jobs.c.id == sa.bindparam("job_id", type_=sa.Uuid))


@functools.cache
def requeue_statement() -> sa.Executable:
    """Requeue ``:job_id`` if it is dead; return its row if it was."""
    return (
        sa.update(jobs)
        .where(
            jobs.c.id == sa.bindparam("job_id", type_=sa.Uuid),
            jobs.c.state == JobState.DEAD.value,
        )
        .values(**requeued_values())
        .returning(*jobs.c)
    )


def requeue_matching_statement(
    kind: str | None, tenant: str | None, older_than: timedelta | None
) -> sa.Executable:
    """Requeue every dead job matching the filters (:func:`dead_filter`); return their rows."""
    return (
        sa.update(jobs)
        .where(dead_filter(kind, tenant, older_than))
        .values(**requeued_values())
        .returning(*jobs.c)
    )


def dead_letter_statement(
    kind: str | None, tenant: str | None, older_than: timedelta | None, limit: int
) -> sa.Select[Any]:
    """Dead jobs matching the filters, the most recently dead first."""
    return (
        sa.select(*jobs.c)
        .where(dead_filter(kind, tenant, older_than))
        .order_by(jobs.c.finished_at.desc(), jobs.c.id)
        .limit(limit)
    )


def _scope(tenant: str | None, kind: str | None) -> sa.ColumnElement[bool]:
    return sa.and_(
        sa.true() if tenant is None else jobs.c.tenant == tenant,
        sa.true() if kind is None else jobs.c.kind == kind,
    )


def state_counts_statement(tenant: str | None, kind: str | None) -> sa.Select[Any]:
    """``(tenant, kind, state, count)`` of the jobs in scope, in that order."""
    return (
        sa.select(jobs.c.tenant, jobs.c.kind, jobs.c.state, sa.func.count())
        .where(_scope(tenant, kind))
        .group_by(jobs.c.tenant, jobs.c.kind, jobs.c.state)
        .order_by(jobs.c.tenant, jobs.c.kind, jobs.c.state)
    )


def oldest_queued_statement(tenant: str | None, kind: str | None) -> sa.Select[Any]:
    """How long the longest-waiting runnable job in scope has waited (``NULL``: none)."""
    waited = sa.type_coerce(sa.func.now() - sa.func.min(jobs.c.run_at), sa.Interval)
    return sa.select(waited).where(
        _scope(tenant, kind),
        jobs.c.state == JobState.QUEUED.value,
        jobs.c.run_at <= sa.func.now(),
    )


def _before(older_than: sa.BindParameter[timedelta]) -> sa.ColumnElement[datetime]:
    return sa.func.now() - older_than


@functools.cache
def expired_leases_statement() -> sa.Executable:
    """Running jobs whose lease expired over ``:older_than`` ago."""
    return sa.select(sa.func.count()).where(
        jobs.c.state == JobState.RUNNING.value,
        jobs.c.lease_expires_at < _before(sa.bindparam("older_than", type_=sa.Interval)),
    )


@functools.cache
def prune_jobs_statement(*, include_dead: bool) -> sa.Executable:
    """Delete done and cancelled (and dead) jobs that finished over ``:older_than`` ago."""
    states = [JobState.DONE.value, JobState.CANCELLED.value]
    if include_dead:
        states.append(JobState.DEAD.value)
    return sa.delete(jobs).where(
        jobs.c.state.in_(states),
        jobs.c.finished_at < _before(sa.bindparam("older_than", type_=sa.Interval)),
    )


@functools.cache
def prune_keys_statement() -> sa.Executable:
    """Delete the idempotency keys past their retention."""
    return sa.delete(ledger).where(ledger.c.expires_at < sa.func.now())


# --- schedules (dms.jobs.schedules) -----------------------------------------------------------


def database_now_statement() -> sa.Select[Any]:
    """The database's clock at the start of the transaction: every worker ticks by one clock."""
    return sa.select(sa.func.now())


def register_schedule_statement() -> sa.Executable:
    """Insert a schedule, or replace one of that name.

    A replaced schedule keeps its place (``next_run_at``) unless its cron expression or time
    zone changed: a worker that registers the same schedules at every start neither skips nor
    repeats a tick.
    """
    stmt = insert(job_schedules)
    new = stmt.excluded
    moved = sa.or_(
        job_schedules.c.cron.is_distinct_from(new.cron),
        job_schedules.c.timezone.is_distinct_from(new.timezone),
    )
    replaced = {
        name: new[name]
        for name in ("kind", "payload", "tenant", "priority", "max_attempts", "catch_up")
    }
    return stmt.on_conflict_do_update(
        index_elements=[job_schedules.c.name],
        set_={
            **replaced,
            "cron": new.cron,
            "timezone": new.timezone,
            "next_run_at": sa.case((moved, new.next_run_at), else_=job_schedules.c.next_run_at),
            "updated_at": sa.func.now(),
        },
    )


def due_schedules_statement() -> sa.Select[Any]:
    """Up to ``:limit`` schedules whose next tick has come, locked.

    Those another pass holds are skipped: concurrent workers tick different schedules, and
    never one tick twice (the pass that holds a row moves it past its ticks before it lets go).
    Each row carries the database's clock as ``now``, what the pass computes its ticks from.
    """
    return (
        sa.select(job_schedules, sa.func.now().label("now"))
        .where(job_schedules.c.next_run_at <= sa.func.now())
        .order_by(job_schedules.c.next_run_at)
        .limit(sa.bindparam("limit"))
        .with_for_update(skip_locked=True)
    )


def advance_schedule_statement() -> sa.Executable:
    """Move a ticked schedule to its next tick; record its last tick and skipped ticks."""
    return (
        sa.update(job_schedules)
        .where(job_schedules.c.name == sa.bindparam("schedule_name"))
        .values(
            next_run_at=sa.bindparam("next_run_at"),
            # A pass that enqueued or skipped nothing keeps what the column says.
            last_tick_at=sa.func.coalesce(
                sa.bindparam("last_tick_at", type_=job_schedules.c.last_tick_at.type),
                job_schedules.c.last_tick_at,
            ),
            skipped_until=sa.func.coalesce(
                sa.bindparam("skipped_until", type_=job_schedules.c.skipped_until.type),
                job_schedules.c.skipped_until,
            ),
        )
    )


def list_schedules_statement() -> sa.Select[Any]:
    """Every schedule, by name."""
    return sa.select(job_schedules).order_by(job_schedules.c.name)


def remove_schedule_statement() -> sa.Executable:
    """Delete the schedule ``:schedule_name``; returns its name if there was one."""
    return (
        sa.delete(job_schedules)
        .where(job_schedules.c.name == sa.bindparam("schedule_name"))
        .returning(job_schedules.c.name)
    )


# --- workers' presence (dms.jobs.presence) ----------------------------------------------------


def announce_statement() -> sa.Executable:
    """Record worker ``:worker_name`` as running now, handling ``:kinds``."""
    stmt = insert(job_workers).values(
        name=sa.bindparam("worker_name"), kinds=sa.bindparam("kinds", type_=ARRAY(sa.Text))
    )
    return stmt.on_conflict_do_update(
        index_elements=[job_workers.c.name],
        set_={"kinds": stmt.excluded.kinds, "seen_at": sa.func.now()},
    )


def forget_stale_workers_statement() -> sa.Executable:
    """Delete the rows of workers unseen for ``:stale_after`` (killed ones never withdraw)."""
    return sa.delete(job_workers).where(
        job_workers.c.seen_at < sa.func.now() - sa.bindparam("stale_after", type_=sa.Interval)
    )


def withdraw_statement() -> sa.Executable:
    """Delete the row of worker ``:worker_name`` (it stops)."""
    return sa.delete(job_workers).where(job_workers.c.name == sa.bindparam("worker_name"))


def live_workers_statement() -> sa.Select[Any]:
    """Workers seen within ``:within``, by name."""
    return (
        sa.select(job_workers)
        .where(job_workers.c.seen_at >= sa.func.now() - sa.bindparam("within", type_=sa.Interval))
        .order_by(job_workers.c.name)
    )


# --- limits (dms.jobs.limits) -----------------------------------------------------------------


def set_limit_statement() -> sa.Executable:
    """Insert or replace the limit ``(:tenant, :kind)``, its rate limit's tokens full."""
    stmt = insert(limits).values(
        tenant=sa.bindparam("tenant"),
        kind=sa.bindparam("kind"),
        max_running=sa.bindparam("max_running", type_=sa.Integer),
        per_second=sa.bindparam("per_second", type_=sa.Float),
        tokens=sa.func.greatest(1.0, sa.func.coalesce(sa.bindparam("per_second"), 0.0)),
    )
    new = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[limits.c.tenant, limits.c.kind],
        set_={
            "max_running": new.max_running,
            "per_second": new.per_second,
            "tokens": new.tokens,
            "tokens_at": sa.func.now(),
            "updated_at": sa.func.now(),
        },
    )


def remove_limit_statement() -> sa.Executable:
    """Delete the limit ``(:tenant, :kind)``; returns its tenant if there was one."""
    return (
        sa.delete(limits)
        .where(limits.c.tenant == sa.bindparam("tenant"), limits.c.kind == sa.bindparam("kind"))
        .returning(limits.c.tenant)
    )


def list_limits_statement(tenant: str | None) -> sa.Select[Any]:
    """The limits (of ``tenant``), each with the jobs it counts running now, by tenant and kind."""
    counted = _running_under(limits)
    query = sa.select(limits, counted.label("running")).order_by(limits.c.tenant, limits.c.kind)
    if tenant is not None:
        query = query.where(limits.c.tenant == sa.bindparam("tenant"))
    return query
