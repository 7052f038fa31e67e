"""The body of ``alembic/env.py``: what plain ``alembic`` (and ``dms alembic``) run.

``alembic upgrade`` and ``downgrade`` migrate the whole fleet through :mod:`.runner`, in
parallel with ``-x jobs=N``, or one tenant with ``-x tenant=<slug>``. Other commands that need
a database (``check``, ``current``, ``stamp``) run once per schema, the shared schema first,
each in its own transaction. A caller that hands alembic a connection and a scope in
``config.attributes`` gets exactly that one schema.

Errors become ``CommandError``, which alembic prints as one ``FAILED:`` line; Ctrl-C or SIGTERM
prints how far the run got and the command that finishes it, and exits 130 (143).
"""

from __future__ import annotations

import logging
import shlex
import sys
from typing import Any

import sqlalchemy as sa
from alembic.runtime.environment import EnvironmentContext
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

from dms import citus, tenancy
from dms.config import SHARED_SCHEMA, settings_of
from dms.db import create_engine
from dms.errors import DmsError, FleetInterrupted, MigrationFailed, TenantNotFound
from dms.fleet.arguments import AUTO_JOBS, Jobs
from dms.fleet.interrupts import sigterm_as_interrupt
from dms.fleet.progress import progress_for
from dms.fleet.report import FleetReport
from dms.migrations import runner
from dms.migrations.schema_step import (
    advisory_lock,
    configure,
    declared_metadata,
)
from dms.migrations.scope import MigrationScope
from dms.migrations.scripts import Scripts
from dms.migrations.status import registered_schemas
from dms.users import require_users_table


def run_from_alembic(context: EnvironmentContext) -> None:
    """Body of ``alembic/env.py``: migrate one given schema, or the whole fleet."""
    if context.is_offline_mode():
        raise CommandError("dms migrations run online only; --sql (offline) mode is not supported")
    attributes = context.config.attributes
    conn: Connection | None = attributes.get("connection")
    if conn is not None:
        _run_on(context, conn, attributes["scope"])
        return
    engine: Engine | None = attributes.get("engine")
    try:
        if engine is not None:
            _run_fleet(context, engine)
            return
        engine = create_engine(context.config.get_main_option("sqlalchemy.url") or None)
        try:
            _run_fleet(context, engine)
        finally:
            engine.dispose()
    # Plain `alembic ...` prints a CommandError as one line and exits with status 1.
    except DmsError as exc:
        raise CommandError(str(exc)) from exc


def _command(context: EnvironmentContext) -> str:
    """The alembic command running: ``upgrade``, ``downgrade``, ``check``, ``current``, ...

    From alembic's command line; from ``config.attributes["command"]`` for callers of
    ``alembic.command.*`` (else a command with a target is taken for an upgrade).
    """
    command_line = getattr(context.config.cmd_opts, "cmd", None)
    if command_line:
        return str(getattr(command_line[0], "__name__", ""))
    named = context.config.attributes.get("command")
    if named is not None:
        return str(named)
    try:
        context.get_revision_argument()
    except KeyError:
        return "other"
    return "upgrade"


def _run_fleet(context: EnvironmentContext, engine: Engine) -> None:
    options = context.get_x_argument(as_dictionary=True)
    tenant = options.get("tenant")
    command = _command(context)
    if command in ("upgrade", "downgrade"):
        revision = str(context.get_revision_argument() or "base")
        jobs = _jobs(options.get("jobs"), command_line=context.config.cmd_opts is not None)
        _migrate(context, engine, command, revision, tenant=tenant, jobs=jobs)
    else:
        _each_schema(context, engine, tenant)


def _jobs(text: str | None, *, command_line: bool) -> Jobs:
    """``-x jobs=N``; else as many as needed from alembic's command line, one from its API.

    Alembic's command line has the main guard that spawned processes need; a script calling
    ``alembic.command`` may not.
    """
    if text is None:
        return AUTO_JOBS if command_line else None
    if not text.isdigit() or int(text) < 1:
        raise CommandError(f"-x jobs={text}: give a number of worker processes, at least 1")
    return int(text)


def _migrate(
    context: EnvironmentContext,
    engine: Engine,
    command: str,
    revision: str,
    *,
    tenant: str | None,
    jobs: Jobs,
) -> None:
    migrate = runner.upgrade if command == "upgrade" else runner.downgrade
    if logging.getLogger("dms.fleet").level == logging.NOTSET:
        logging.getLogger("dms.fleet").setLevel(logging.INFO)
    try:
        with sigterm_as_interrupt() as signals:
            migrate(
                engine,
                revision,
                tenant=tenant,
                jobs=jobs,
                progress=progress_for(command),
                scripts=Scripts.of_config(context.config),
            )
    except FleetInterrupted as interrupted:
        print(_interrupted_message(context, interrupted.report), file=sys.stderr)
        raise SystemExit(signals.exit_status) from None
    except MigrationFailed as failed:
        raise CommandError(str(failed)) from failed


def _interrupted_message(context: EnvironmentContext, report: FleetReport) -> str:
    """How far the run got, and the alembic command line that finishes it."""
    cmd_opts: Any = context.config.cmd_opts
    argv = ["alembic"]
    configs = getattr(cmd_opts, "config", None) or []
    # Alembic 1.20 takes -c more than once (a list); older versions one file (a string).
    for config_file in [configs] if isinstance(configs, str) else configs:
        argv += ["-c", str(config_file)]
    for option in getattr(cmd_opts, "x", None) or []:
        argv += ["-x", str(option)]
    argv += [report.operation, report.target or "base"]
    return f"interrupted: {report.how_far()}; finish with: {shlex.join(argv)}"


# --- other commands: once per schema --------------------------------------------------------


def _each_schema(context: EnvironmentContext, engine: Engine, tenant: str | None) -> None:
    settings = settings_of(engine)
    with engine.connect() as conn:
        require_users_table(conn, settings)
        schemas = sorted(registered_schemas(conn))
    if tenant is not None:
        schema = tenancy.schema_name(tenant)
        if schema not in schemas:
            raise TenantNotFound(f"tenant {tenant!r} does not exist")
        schemas = [schema]
    else:
        _in_transaction(context, engine, MigrationScope.shared(settings))
    for schema in schemas:
        _in_transaction(context, engine, MigrationScope.tenant(schema, settings))


def _in_transaction(context: EnvironmentContext, engine: Engine, scope: MigrationScope) -> None:
    with engine.begin() as conn:
        tenancy.set_lock_timeout(conn)
        advisory_lock(conn, scope.schema)
        if scope.schema == SHARED_SCHEMA and _missing_schema(conn, scope.schema):
            citus.keep_schema_local(conn)
            conn.execute(sa.schema.CreateSchema(scope.schema, if_not_exists=True))
        _run_on(context, conn, scope)


def _missing_schema(conn: Connection, schema: str) -> bool:
    return conn.scalar(sa.select(sa.func.to_regnamespace(schema))) is None


def _run_on(context: EnvironmentContext, conn: Connection, scope: MigrationScope) -> None:
    metadata = declared_metadata(scope, conn.dialect.default_schema_name)
    configure(context, conn, scope, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations(scope=scope)
