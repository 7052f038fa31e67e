"""Creating and dropping tenants: one, or thousands at once.

A tenant is created in one transaction: its registry row (with the registry's copy of its
revision), its schema, every table at the head revision and its version row, from the SQL the
tenant revisions emit, recorded once per process (:mod:`dms.migrations.template`: the same
catalog as migrating step by step, in a fraction of the time). Either all of it exists
afterwards, or nothing does. Dropping one removes its registry row and its schema with
everything in it, in one transaction.

Many at once (:func:`create_tenants`, :func:`drop_tenants`): every name is checked before any
SQL runs, and the registry is read once; each tenant is still its own transaction, so a bad or
taken name fails alone and is reported while the others go on, spread over ``jobs`` worker
processes (:mod:`dms.fleet.pool`). Interrupted, every tenant exists whole or not at all, and
the same call finishes the rest (names already done are reported as existing, or not found).

On a Citus cluster the new schema becomes a distributed schema, placed whole on one node, in
the same transaction (:func:`dms.citus.distribute_schema`; docs/scaling.md).

Locks on ``users``: creating a tenant adds foreign keys to the IAM's ``users`` table, which
takes a SHARE ROW EXCLUSIVE lock on it until commit; the tenant revisions add those keys last,
so the lock is held for the last few statements of the transaction only, and tenants created
in parallel wait for each other only there. Dropping one takes ACCESS EXCLUSIVE on ``users``
while its foreign keys go. Every such transaction runs under ``lock_timeout``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateSchema, DropSchema

from dms import citus, roles, tenancy
from dms.config import Settings, settings_of, with_settings
from dms.domain.validation import check_flag
from dms.errors import (
    FleetInterrupted,
    FleetStopped,
    InvalidTenantName,
    TenantExists,
    TenantNotFound,
)
from dms.fleet.arguments import Jobs, check_jobs, check_names
from dms.fleet.pool import PoolResult, Task, run_each
from dms.fleet.progress import NoProgress, Progress
from dms.fleet.report import FleetReport, Outcome, TenantReport, stopped_message
from dms.fleet.sizing import worker_processes
from dms.migrations import registry
from dms.migrations.scripts import Scripts
from dms.migrations.status import read_versions
from dms.migrations.template import TenantTemplate, tenant_template
from dms.schema.ddl import execute_ddl
from dms.tenancy import Tenant
from dms.users import require_users_table


def create_tenant(engine: Engine, slug: str, *, settings: Settings | None = None) -> Tenant:
    """Create tenant ``slug``: registry row, schema, every table at the head revision.

    One transaction: either all of it exists afterwards, or nothing does.
    Raises :class:`InvalidTenantName` before any SQL, :class:`TenantExists` if it is taken,
    :class:`~dms.errors.UsersTableMissing` if the IAM's ``users`` table is not there,
    :class:`~dms.errors.NotMigrated` if the database has no registry yet.
    """
    tenancy.validate_slug(slug)
    if settings is not None:
        engine = with_settings(engine, settings)
    return _create(engine, slug, Scripts.default(), check_users=True)


def drop_tenant(engine: Engine, slug: str, *, settings: Settings | None = None) -> None:
    """Drop tenant ``slug``: its schema with everything in it, and its registry row.

    Raises :class:`InvalidTenantName` before any SQL and :class:`TenantNotFound` if it is not
    registered. A schema that is registered but missing is tolerated: the row goes anyway.
    """
    tenancy.validate_slug(slug)
    if settings is not None:
        engine = with_settings(engine, settings)
    _drop(engine, slug)


def _create(engine: Engine, slug: str, scripts: Scripts, *, check_users: bool) -> Tenant:
    settings = settings_of(engine)
    schema = tenancy.schema_name(slug)
    with engine.begin() as conn:
        if check_users:
            require_users_table(conn, settings)
        citus.queue_for_creation(conn)  # before the lock timeout: docs/scaling.md says why
        tenancy.set_lock_timeout(conn, settings)
        tenancy.note_served(conn, slug)
        tenant = tenancy.register(conn, slug)
        conn.execute(CreateSchema(schema))
        # On Citus, before the tables: each is then created distributed, which measured about
        # twice as fast as converting them all at the end (a no-op if the cluster already
        # distributed the schema, with citus.enable_schema_based_sharding on).
        citus.distribute_schema(conn, schema)
        template = tenant_template(conn, scripts, settings)
        _build_tables(conn, schema, template)
        roles.grant_tenants(conn, [schema])
        # The recording wrote the schema's version row; the registry's copy goes with it.
        registry.record(conn, schema, template.head)
    return tenant


def _build_tables(conn: Connection, schema: str, template: TenantTemplate) -> None:
    if citus.is_citus(conn):
        # Citus forwards a DDL command's whole query string to the node holding the schema,
        # which refuses several commands in one.
        for statement in template.statements(schema):
            execute_ddl(conn, statement)
    else:
        execute_ddl(conn, template.batch(schema))


def _drop(engine: Engine, slug: str) -> str | None:
    """Drop ``slug``; its revision before (``None``: base, or no version table)."""
    schema = tenancy.schema_name(slug)
    with engine.begin() as conn:
        tenancy.set_lock_timeout(conn)
        tenancy.note_served(conn, slug)
        tenancy.unregister(conn, slug)
        before = read_versions(conn, [schema])[schema]
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))
    return before


# --- many at once -------------------------------------------------------------------------


def create_tenants(
    engine: Engine,
    slugs: Iterable[str],
    *,
    jobs: Jobs = None,
    progress: Progress | None = None,
    if_not_exists: bool = False,
) -> FleetReport:
    """Create every tenant of ``slugs`` at the head revision, each in its own transaction.

    Returns the report: ``created``, or ``invalid`` (refused before any SQL), ``exists`` (or,
    with ``if_not_exists``, ``skipped``: how an interrupted run is finished), or ``failed``
    (rolled back) for the names that were not. ``jobs``: worker processes (default: this
    one; :data:`~dms.fleet.AUTO_JOBS`: :func:`~dms.migrations.default_jobs`). Raises
    :class:`~dms.errors.ValidationError` before any SQL if ``slugs`` is not an iterable of
    names (one string is not), ``jobs`` not one of those or a flag not a bool;
    :class:`~dms.errors.UsersTableMissing` or :class:`~dms.errors.NotMigrated` before creating
    any; and
    :class:`~dms.errors.FleetInterrupted` / :class:`~dms.errors.FleetStopped` with the report
    if the run is stopped.
    """
    check_jobs(jobs)
    check_flag("if_not_exists", if_not_exists)
    names, refused = _checked_names(slugs)
    scripts = Scripts.default()
    taken: set[str] = set()
    if names:
        with engine.connect() as conn:
            require_users_table(conn)
            taken = tenancy.registered_slugs(conn, names)
    outcome, error = (Outcome.SKIPPED, None) if if_not_exists else (Outcome.EXISTS, "exists")
    refused += [
        _refused(slug, outcome, error and f"tenant {slug!r} already exists")
        for slug in names
        if slug in taken
    ]
    plan = [slug for slug in names if slug not in taken]
    result = _dispatch(
        engine, _create_task, _Creation(scripts=scripts), plan, jobs=jobs, progress=progress
    )
    return _finish("create", scripts.head(), refused, result, engine)


def drop_tenants(
    engine: Engine,
    slugs: Iterable[str],
    *,
    jobs: Jobs = None,
    progress: Progress | None = None,
    if_exists: bool = False,
) -> FleetReport:
    """Drop every tenant of ``slugs`` with all its data, each in its own transaction.

    Returns the report: ``dropped``, or ``invalid``, ``not_found`` (with ``if_exists``:
    ``skipped``) or ``failed`` (rolled back). Bad arguments and interruptions as for
    :func:`create_tenants`.
    """
    check_jobs(jobs)
    check_flag("if_exists", if_exists)
    names, refused = _checked_names(slugs)
    known: set[str] = set()
    if names:
        with engine.connect() as conn:
            known = tenancy.registered_slugs(conn, names)
    outcome, error = (Outcome.SKIPPED, None) if if_exists else (Outcome.NOT_FOUND, "missing")
    refused += [
        _refused(slug, outcome, error and f"tenant {slug!r} does not exist")
        for slug in names
        if slug not in known
    ]
    plan = [slug for slug in names if slug in known]
    result = _dispatch(engine, _drop_task, None, plan, jobs=jobs, progress=progress)
    return _finish("drop", None, refused, result, engine)


@dataclass(frozen=True, kw_only=True)
class _Creation:
    scripts: Scripts


def _create_task(engine: Engine, creation: _Creation, slug: str) -> TenantReport:
    started = time.perf_counter()
    try:
        _create(engine, slug, creation.scripts, check_users=False)
    except TenantExists as exc:
        return _task_report(slug, started, Outcome.EXISTS, str(exc))
    # Any error of one tenant must not stop the others: it is reported.
    except Exception as exc:
        return _task_failure(slug, started, exc)
    return _task_report(slug, started, Outcome.CREATED, to_revision=creation.scripts.head())


def _drop_task(engine: Engine, _: None, slug: str) -> TenantReport:
    started = time.perf_counter()
    try:
        before = _drop(engine, slug)
    except TenantNotFound as exc:
        return _task_report(slug, started, Outcome.NOT_FOUND, str(exc))
    except Exception as exc:
        return _task_failure(slug, started, exc)
    return _task_report(slug, started, Outcome.DROPPED, from_revision=before)


def _task_report(
    slug: str,
    started: float,
    outcome: Outcome,
    error: str | None = None,
    *,
    from_revision: str | None = None,
    to_revision: str | None = None,
    lost_connection: bool = False,
) -> TenantReport:
    return TenantReport(
        tenant=slug,
        from_revision=from_revision,
        to_revision=to_revision,
        seconds=time.perf_counter() - started,
        outcome=outcome,
        error=error,
        lost_connection=lost_connection,
    )


def _task_failure(slug: str, started: float, exc: Exception) -> TenantReport:
    lost = isinstance(exc, DBAPIError) and exc.connection_invalidated
    error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    outcome = Outcome.INTERRUPTED if lost else Outcome.FAILED
    return _task_report(slug, started, outcome, error, lost_connection=lost)


def _checked_names(slugs: Iterable[str]) -> tuple[list[str], list[TenantReport]]:
    """The valid names, once each and in order; a report for each invalid one, once.

    Raises :class:`~dms.errors.ValidationError` if ``slugs`` is not a list of names at all.
    """
    names: list[str] = []
    refused: list[TenantReport] = []
    # Items are told apart as text: a bad one need not even be hashable.
    for shown_as, slug in {str(item): item for item in check_names(slugs)}.items():
        try:
            names.append(tenancy.validate_slug(slug))
        except InvalidTenantName as exc:
            refused.append(_refused(shown_as, Outcome.INVALID, str(exc)))
    return names, refused


def _refused(slug: str, outcome: Outcome, error: str | None) -> TenantReport:
    return TenantReport(
        tenant=slug, from_revision=None, to_revision=None, seconds=0.0, outcome=outcome, error=error
    )


def _dispatch(
    engine: Engine,
    task: Task,
    parameters: object,
    plan: list[str],
    *,
    jobs: Jobs,
    progress: Progress | None,
) -> PoolResult:
    progress = progress or NoProgress()
    jobs = worker_processes(jobs, engine, len(plan))
    progress.begin(len(plan))
    try:
        return run_each(task, parameters, plan, engine=engine, jobs=jobs, progress=progress)
    finally:
        progress.end()


def _finish(
    operation: str,
    target: str | None,
    refused: list[TenantReport],
    result: PoolResult,
    engine: Engine,
) -> FleetReport:
    settled = _settle(operation, list(result.unsettled), engine)
    pending = [_refused(slug, Outcome.PENDING, None) for slug in result.pending]
    report = FleetReport(
        operation=operation,
        target=target,
        tenants=tuple(
            sorted([*refused, *result.reports, *settled, *pending], key=lambda r: r.tenant)
        ),
        stopped=result.stopped,
    )
    if result.interrupted:
        raise FleetInterrupted(report)
    if result.stopped is not None:
        raise FleetStopped(stopped_message(report), report)
    return report


def _settle(operation: str, slugs: list[str], engine: Engine) -> list[TenantReport]:
    """Whether each tenant in flight when the run stopped got created (dropped) or not."""
    if not slugs:
        return []
    try:
        with engine.connect() as conn:
            registered = tenancy.registered_slugs(conn, slugs)
    except DBAPIError:
        registered = set() if operation == "create" else set(slugs)  # unknown: as they were
    creating = operation == "create"
    done = Outcome.CREATED if creating else Outcome.DROPPED
    return [
        _refused(slug, done if (slug in registered) == creating else Outcome.INTERRUPTED, None)
        for slug in slugs
    ]
