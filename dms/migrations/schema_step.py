"""Migrating one schema on one connection: what every entry point does per schema.

:func:`migrate_schema` moves one schema (shared or tenant) to a revision inside the caller's
transaction, with an Alembic environment made here rather than by running ``env.py``: the
script directory is loaded once per process (:meth:`Scripts.directory`), so thousands of
tenants do not compile the revisions thousands of times. :func:`configure` is the part that
``alembic/env.py`` shares with it (commands such as ``alembic check`` and ``current``).

Alembic's environment and ``op`` proxy are process-global: within a process, every use holds
:data:`ALEMBIC_LOCK`; parallel fleet runs use processes (:mod:`dms.fleet.pool`).
"""

from __future__ import annotations

import threading
from typing import Any, Literal

import sqlalchemy as sa
from alembic.runtime.environment import EnvironmentContext
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from dms import citus
from dms.errors import MigrationError
from dms.jobs import tables as _job_tables  # noqa: F401 -- puts the job tables on shared.metadata
from dms.migrations.registry import RevisionCopy
from dms.migrations.scope import MigrationScope
from dms.migrations.scripts import VERSION_TABLE, Scripts
from dms.schema import shared, tenant

#: Held by every use of Alembic's process-global environment in this process.
ALEMBIC_LOCK = threading.RLock()

Direction = Literal["upgrade", "downgrade"]


def advisory_lock(conn: Connection, schema: str) -> None:
    """Take the transaction-level lock that serialises migrations of ``schema``."""
    key = sa.func.hashtextextended(sa.literal(f"dms.migrate:{schema}"), 0)
    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


def migrate_schema(
    conn: Connection,
    scope: MigrationScope,
    target: str | None,
    direction: Direction = "upgrade",
    scripts: Scripts | None = None,
) -> None:
    """Move ``scope``'s schema to ``target`` (absolute; ``None``: base) in ``conn``'s transaction.

    Alembic reads the schema's own version table, runs every step on the way and writes the
    new revision; nothing is committed here.
    """
    scripts = scripts or Scripts.default()
    directory = scripts.directory()
    destination = target or "base"

    def steps(current: Any, _context: Any) -> Any:
        # What alembic.command.upgrade/downgrade hand to the environment.
        if direction == "upgrade":
            return directory._upgrade_revs(destination, current)
        return directory._downgrade_revs(destination, current)

    # Not entered as a context manager: that would install it as ``alembic.context``, which
    # must stay the command's own when this runs under ``alembic upgrade`` (env.py).
    context = EnvironmentContext(scripts.config(), directory, fn=steps, destination_rev=destination)
    if scope.is_tenant:
        # On Citus, a tenant's tables carry triggers that only this setting lets DDL touch.
        citus.allow_tenant_triggers(conn)
    with ALEMBIC_LOCK:
        try:
            run(context, conn, scope)
        except CommandError as exc:
            # Alembic's refusal of a target it cannot reach from this schema's revision.
            raise MigrationError(str(exc)) from exc


def run(context: EnvironmentContext, conn: Connection, scope: MigrationScope) -> None:
    """Configure ``context`` for ``scope``'s schema on ``conn`` and run its command there."""
    configure(context, conn, scope, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations(scope=scope)


def configure(
    context: EnvironmentContext,
    conn: Connection,
    scope: MigrationScope,
    *,
    target_metadata: sa.MetaData | None,
) -> None:
    """Point ``context`` at ``scope``'s schema: its own version table, only its objects.

    ``target_metadata`` is what ``alembic check`` and autogenerate compare with
    (:func:`declared_metadata`); running revisions needs none. On a registered tenant, this
    locks its registry row and has every step write the registry's copy of the revision in
    the same transaction (:class:`~dms.migrations.registry.RevisionCopy`).
    """
    context.configure(
        on_version_apply=RevisionCopy.start(conn, scope),
        connection=conn,
        version_table_schema=scope.schema,
        target_metadata=target_metadata,
        include_schemas=True,
        include_name=_only_schema(scope.schema),
        include_object=_not_users,
        upgrade_token=f"{scope.schema}_upgrades",
        downgrade_token=f"{scope.schema}_downgrades",
    )


def _only_schema(schema: str) -> Any:
    def include_name(name: str | None, type_: str, parent_names: dict[str, str | None]) -> bool:
        if type_ == "schema":
            return name == schema
        return not (type_ == "table" and name == VERSION_TABLE)

    return include_name


def _not_users(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    # users belongs to the IAM service: referenced, never created or compared.
    return not (type_ == "table" and name == "users")


def declared_metadata(scope: MigrationScope, default_schema: str | None) -> sa.MetaData:
    """What the schema should look like at head, for ``alembic check`` / autogenerate."""
    if not scope.is_tenant:
        return shared.metadata
    copy = sa.MetaData(naming_convention=tenant.metadata.naming_convention)
    # PostgreSQL reflects a reference into the default schema without a schema name.
    users_schema: Any = (
        sa.schema.BLANK_SCHEMA if scope.users_schema == default_schema else scope.users_schema
    )
    sa.Table(
        "users",
        copy,
        sa.Column("id", sa.Uuid, primary_key=True),
        schema=(None if users_schema is sa.schema.BLANK_SCHEMA else users_schema),
    )
    for table in tenant.metadata.sorted_tables:
        if table is not tenant.users:
            table.to_metadata(
                copy,
                schema=scope.schema,
                referred_schema_fn=lambda _t, _s, _fk, ref: (
                    users_schema if ref == tenant.USERS_SCHEMA else scope.schema
                ),
            )
    return copy
