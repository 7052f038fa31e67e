"""Upgrading and downgrading the fleet: the shared schema, then every tenant, in parallel.

Upgrades run the shared schema first (tenant revisions may need shared objects), then each
tenant; downgrades the tenants first, then the shared schema (the registry must outlive the
schemas it lists), and only if every tenant got there. Each tenant migrates in its own
transaction under its own advisory lock and ``lock_timeout``: a failing tenant rolls back alone
and is reported while the others go on, and two concurrent runs serialise per tenant.

The target is resolved once, up front (:meth:`Scripts.resolve`): a mistyped revision is one
error before anything runs, and a relative one (``-1``) becomes absolute, counted from the
shared schema's revision (or the one tenant's). Tenants already there are skipped after one
query of the registry, whose copy of each tenant's revision every migration keeps in step
(:mod:`.registry`); a single tenant (``tenant=``) is always visited. Each visited tenant reads
its own version table under its lock (a copy found wrong is corrected there). The others are
spread over ``jobs`` worker processes (:mod:`dms.fleet.pool`); stopped at any point, each
tenant is at its old revision or at the target, and the same call with the same absolute target
finishes the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from dms import citus, roles, tenancy
from dms.config import SHARED_SCHEMA, Settings, settings_of
from dms.domain.validation import check_text
from dms.driver_errors import QUERY_CANCELED, sqlstate_of
from dms.errors import (
    FleetInterrupted,
    FleetStopped,
    MigrationError,
    MigrationFailed,
    TenantFailure,
    TenantNotFound,
    ValidationError,
)
from dms.fleet.arguments import Jobs, check_jobs
from dms.fleet.pool import INTERRUPTED, PoolResult, run_each
from dms.fleet.progress import NoProgress, Progress
from dms.fleet.report import FleetReport, Outcome, TenantReport, stopped_message
from dms.fleet.sizing import worker_processes
from dms.migrations import registry
from dms.migrations.schema_step import (
    Direction,
    advisory_lock,
    migrate_schema,
)
from dms.migrations.scope import MigrationScope
from dms.migrations.scripts import Scripts
from dms.migrations.status import (
    read_fleet_versions,
    read_versions,
    registered_schemas,
    tenant_revisions,
)
from dms.users import require_users_table


def upgrade(
    engine: Engine,
    revision: str = "head",
    *,
    tenant: str | None = None,
    jobs: Jobs = None,
    progress: Progress | None = None,
    scripts: Scripts | None = None,
) -> FleetReport:
    """Upgrade the shared schema, then every tenant (or only ``tenant``), to ``revision``.

    ``jobs``: worker processes (default: this one; :data:`~dms.fleet.AUTO_JOBS`:
    :func:`~dms.fleet.sizing.default_jobs`). Raises
    :class:`~dms.errors.ValidationError` before any SQL if ``revision`` is not text or is
    blank, or ``jobs`` not a positive int, :class:`~dms.errors.MigrationError` for a revision
    the scripts do not have or on the wrong side of the current one,
    :class:`~dms.errors.MigrationFailed` if some tenants failed (each rolled back alone),
    :class:`~dms.errors.FleetInterrupted` on Ctrl-C and :class:`~dms.errors.FleetStopped`
    when the run could not go on; each carries the report.
    """
    return _Run(engine, "upgrade", tenant, jobs, progress, scripts).run(revision)


def downgrade(
    engine: Engine,
    revision: str,
    *,
    tenant: str | None = None,
    jobs: Jobs = None,
    progress: Progress | None = None,
    scripts: Scripts | None = None,
) -> FleetReport:
    """Downgrade every tenant (or only ``tenant``), then the shared schema, to ``revision``.

    As :func:`upgrade`; the shared schema moves only if every tenant did.
    """
    return _Run(engine, "downgrade", tenant, jobs, progress, scripts).run(revision)


def downgrade_target(
    engine: Engine, revision: str, *, tenant: str | None = None, scripts: Scripts | None = None
) -> str | None:
    """The absolute revision that :func:`downgrade` to ``revision`` would reach (``None``: base).

    Resolved and refused exactly as :func:`downgrade` resolves and refuses it, without moving
    anything: for a command that asks before it destroys data.
    """
    return _Run(engine, "downgrade", tenant, None, None, scripts).target(revision)


# --- one tenant (runs in a worker process, or here) ----------------------------------------


@dataclass(frozen=True, kw_only=True)
class TenantMigration:
    """What every tenant of a run is to do; sent to the worker processes."""

    direction: Direction
    target: str | None
    scripts: Scripts


def migrate_tenant(engine: Engine, migration: TenantMigration, slug: str) -> TenantReport:
    """Migrate tenant ``slug`` in one transaction under its lock; never raises for the tenant."""
    settings = settings_of(engine)
    schema = tenancy.schema_name(slug)
    started = time.perf_counter()
    before: str | None = None
    try:
        with engine.begin() as conn:
            tenancy.set_lock_timeout(conn, settings)
            tenancy.note_served(conn, slug)
            advisory_lock(conn, schema)
            # Read under the lock: a concurrent run may have moved it since the plan was made.
            before = read_versions(conn, [schema])[schema]
            if before == migration.target:
                # Planned from a registry copy that disagreed with the schema: correct the copy.
                registry.record(conn, schema, before)
                return _report(slug, before, before, started, Outcome.SKIPPED)
            scope = MigrationScope.tenant(schema, settings)
            migrate_schema(conn, scope, migration.target, migration.direction, migration.scripts)
            # A table a revision made (either way) is the application's too, from now on.
            roles.grant_tenants(conn, [schema])
    # Any error of one tenant, whatever raised it, must not stop the others: it is reported.
    except Exception as exc:
        return _failure(engine, slug, before, started, exc)
    return _report(slug, before, migration.target, started, Outcome.MIGRATED)


def _refuse_wrong_way(
    scripts: Scripts, direction: Direction, anchor: str, current: str | None, target: str | None
) -> None:
    """Refuse a target on the wrong side of ``anchor``'s revision, before anything runs.

    Alembic would refuse a downgrade to a later revision in each schema, one failure per
    tenant, and run an upgrade to an earlier one as no step at all, which would be reported
    as done. A revision these scripts do not know is left to alembic, which names it.
    """
    chain = scripts.chain()
    if current is not None and current not in chain:
        return
    here = chain.index(current) + 1 if current is not None else 0
    there = chain.index(target) + 1 if target is not None else 0
    if direction == "upgrade" and there < here:
        raise MigrationError(
            f"cannot upgrade to {target or 'base'}: it is below {current}, where {anchor} is "
            "(downgrade to go back to it; a tenant behind it can be upgraded alone)"
        )
    if direction == "downgrade" and there > here:
        raise MigrationError(
            f"cannot downgrade to {target}: it is above {current or 'base'}, where {anchor} is "
            "(upgrade to it instead)"
        )


def _report(
    slug: str,
    before: str | None,
    after: str | None,
    started: float,
    outcome: Outcome,
    *,
    error: str | None = None,
    lost_connection: bool = False,
) -> TenantReport:
    return TenantReport(
        tenant=slug,
        from_revision=before,
        to_revision=after,
        seconds=time.perf_counter() - started,
        outcome=outcome,
        error=error,
        lost_connection=lost_connection,
    )


def _failure(
    engine: Engine, slug: str, before: str | None, started: float, exc: Exception
) -> TenantReport:
    error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    lost = isinstance(exc, DBAPIError) and exc.connection_invalidated
    cancelled = isinstance(exc, DBAPIError) and sqlstate_of(exc) == QUERY_CANCELED
    outcome = Outcome.INTERRUPTED if cancelled or lost else Outcome.FAILED
    after = before if lost else _revision_now(engine, tenancy.schema_name(slug), before)
    return _report(slug, before, after, started, outcome, error=error, lost_connection=lost)


def _revision_now(engine: Engine, schema: str, fallback: str | None) -> str | None:
    """The revision of ``schema`` as committed now (``fallback`` if it cannot be read)."""
    try:
        with engine.connect() as conn:
            return read_versions(conn, [schema])[schema]
    except DBAPIError:
        return fallback


# --- the fleet ------------------------------------------------------------------------------


@dataclass
class _Run:
    """One fleet upgrade or downgrade, from the resolved target to the report."""

    engine: Engine
    direction: Direction
    tenant: str | None
    jobs: Jobs
    progress: Progress | None
    scripts: Scripts | None

    def run(self, revision: str) -> FleetReport:
        target = self.target(revision)
        settings = settings_of(self.engine)
        scripts = self.scripts or Scripts.default()
        migration = TenantMigration(direction=self.direction, target=target, scripts=scripts)
        shared = None
        if self.tenant is None and self.direction == "upgrade":
            shared = self._shared(migration, settings)
        report = self._tenants(migration, shared)
        if self.tenant is None and self.direction == "downgrade":
            report = replace(report, shared=self._last_shared(migration, settings, report))
        return report

    def _last_shared(
        self, migration: TenantMigration, settings: Settings, report: FleetReport
    ) -> TenantReport:
        """The shared schema after every tenant went down; Ctrl-C there still has a report."""
        try:
            return self._shared(migration, settings)
        except KeyboardInterrupt:
            raise FleetInterrupted(replace(report, stopped=INTERRUPTED)) from None

    def target(self, revision: str) -> str | None:
        """The absolute target of ``revision``, the arguments, users table and tenant checked."""
        if not check_text("revision", revision).strip():
            raise ValidationError(f"revision must not be blank, not {revision!r}")
        check_jobs(self.jobs)
        if self.tenant is not None:
            tenancy.validate_slug(self.tenant)
        scripts = self.scripts or Scripts.default()
        with self.engine.connect() as conn:
            require_users_table(conn, settings_of(self.engine))
            if self.tenant is None:
                anchor = SHARED_SCHEMA
            else:
                anchor = tenancy.schema_name(self.tenant)
                if anchor not in registered_schemas(conn):
                    raise TenantNotFound(f"tenant {self.tenant!r} does not exist")
            current = read_versions(conn, [anchor])[anchor]
        target = scripts.resolve(revision, current=current)
        _refuse_wrong_way(scripts, self.direction, anchor, current, target)
        return target

    def _shared(self, migration: TenantMigration, settings: Settings) -> TenantReport:
        started = time.perf_counter()
        with self.engine.begin() as conn:
            tenancy.set_lock_timeout(conn, settings)
            # The lock first: two first runs at once would otherwise both create the schema.
            advisory_lock(conn, SHARED_SCHEMA)
            before = read_versions(conn, [SHARED_SCHEMA])[SHARED_SCHEMA]
            if before == migration.target:
                return _report(SHARED_SCHEMA, before, before, started, Outcome.SKIPPED)
            # Only when missing: even IF NOT EXISTS needs CREATE on the database, which a no-op
            # run must not require (nor run DDL at all).
            if conn.scalar(sa.select(sa.func.to_regnamespace(SHARED_SCHEMA))) is None:
                citus.keep_schema_local(conn)
                conn.execute(sa.schema.CreateSchema(SHARED_SCHEMA, if_not_exists=True))
            scope = MigrationScope.shared(settings)
            migrate_schema(conn, scope, migration.target, migration.direction, migration.scripts)
            roles.grant_shared(conn)
        return _report(SHARED_SCHEMA, before, migration.target, started, Outcome.MIGRATED)

    def _tenants(self, migration: TenantMigration, shared: TenantReport | None) -> FleetReport:
        if self.tenant is not None:
            # One tenant: its own version table, which is what counts if its copy were wrong.
            by_schema = {tenancy.schema_name(self.tenant): self.tenant}
            versions = read_fleet_versions(self.engine, sorted(by_schema))
        else:
            with self.engine.connect() as conn:
                by_schema = registered_schemas(conn)
            versions = tenant_revisions(self.engine, sorted(by_schema))
        before = {by_schema[schema]: revision for schema, revision in versions.items()}
        plan = sorted(
            slug
            for slug, revision in before.items()
            # One tenant named is always visited: that corrects a wrong registry copy too.
            if revision != migration.target or slug == self.tenant
        )
        planned = set(plan)
        skipped = [
            TenantReport(
                tenant=slug,
                from_revision=revision,
                to_revision=revision,
                seconds=0.0,
                outcome=Outcome.SKIPPED,
            )
            for slug, revision in before.items()
            if slug not in planned
        ]
        result = self._dispatch(migration, plan)
        reports = [*skipped, *result.reports, *self._settle(result, before, migration.target)]
        report = FleetReport(
            operation=self.direction,
            target=migration.target,
            tenants=tuple(sorted(reports, key=lambda r: r.tenant)),
            shared=shared,
            stopped=result.stopped,
        )
        _raise_unless_complete(report, result)
        return report

    def _dispatch(self, migration: TenantMigration, plan: list[str]) -> PoolResult:
        progress = self.progress or NoProgress()
        jobs = worker_processes(self.jobs, self.engine, len(plan))
        progress.begin(len(plan))
        try:
            return run_each(
                migrate_tenant, migration, plan, engine=self.engine, jobs=jobs, progress=progress
            )
        finally:
            progress.end()

    def _settle(
        self, result: PoolResult, before: dict[str, str | None], target: str | None
    ) -> list[TenantReport]:
        """Reports for the tenants a stopped run left: read back where each one is."""
        unsettled = list(result.unsettled)
        now: dict[str, str | None] = {}
        if unsettled:
            schemas = [tenancy.schema_name(slug) for slug in unsettled]
            try:
                with self.engine.connect() as conn:
                    versions = read_versions(conn, schemas)
                now = {slug: versions[tenancy.schema_name(slug)] for slug in unsettled}
            except DBAPIError:
                now = {slug: before[slug] for slug in unsettled}  # unknown: say "as it was"
        settled = [
            TenantReport(
                tenant=slug,
                from_revision=before[slug],
                to_revision=now[slug],
                seconds=0.0,
                outcome=Outcome.MIGRATED if now[slug] == target else Outcome.INTERRUPTED,
            )
            for slug in unsettled
        ]
        pending = [
            TenantReport(
                tenant=slug,
                from_revision=before[slug],
                to_revision=before[slug],
                seconds=0.0,
                outcome=Outcome.PENDING,
            )
            for slug in result.pending
        ]
        return settled + pending


def _raise_unless_complete(report: FleetReport, result: PoolResult) -> None:
    if result.interrupted:
        raise FleetInterrupted(report)
    if result.stopped is not None:
        raise FleetStopped(stopped_message(report), report)
    failures = [
        TenantFailure(
            tenant=item.tenant,
            revision=item.to_revision,
            target=report.target or "base",
            error=item.error or item.outcome.value,
        )
        for item in report.tenants
        if item.outcome.is_unfinished
    ]
    if failures:
        raise MigrationFailed(failures, report)
