"""The registry's copy of each tenant's revision, kept in step with the tenant's version table.

Each tenant schema has its own ``alembic_version``; the registry (``dms.tenants.revision``) keeps a
copy of it, so that ``dms status`` and a no-op ``dms migrate`` read one table instead of every
tenant's (:func:`dms.tenancy.recorded_revisions`). The copy must never say what the schema does not,
so it is written in the same transaction as the schema's own version row, by every path that moves
one:

* every Alembic run on a tenant schema (``dms migrate`` / ``downgrade``, plain ``alembic
  upgrade`` / ``downgrade`` / ``stamp``, :func:`~dms.migrations.migrate_schema`) goes through
  :func:`~dms.migrations.schema_step.configure`, which starts a :class:`RevisionCopy`: it locks
  the tenant's registry row first, then writes the revision after every step (Alembic's
  ``on_version_apply``);
* a tenant created from the recording (:mod:`dms.provisioning`) gets the head revision with its
  registry row, in its one transaction (:func:`record`).

Locking the row first matters once: the shared migration that adds the column alters the registry,
and so waits for every tenant transaction that holds a row; it then fills the column from the
version tables with no tenant moving meanwhile. Schemas that are not registered tenants (the
throwaway schemas of the recording and of ``dms check``) have no row: nothing is locked or written,
and no statement is sent for them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext, MigrationInfo
from sqlalchemy.engine import Connection

from dms import tenancy
from dms.errors import MigrationError
from dms.migrations.scope import MigrationScope


@dataclass(frozen=True)
class RevisionCopy:
    """Writes a tenant's revision to its registry row after each step of an Alembic run.

    Made by :meth:`start` before the first step; an instance whose :attr:`slug` is ``None``
    writes nothing (the shared schema, a schema that is not a registered tenant, or a registry
    without its ``revision`` column).
    """

    conn: Connection
    slug: str | None

    @classmethod
    def start(cls, conn: Connection, scope: MigrationScope) -> RevisionCopy:
        """Lock the tenant's registry row (if it has one) for the rest of the transaction."""
        return cls.of_schema(conn, scope.schema if scope.is_tenant else None)

    @classmethod
    def of_schema(cls, conn: Connection, schema: str | None) -> RevisionCopy:
        """As :meth:`start`, for tenant schema ``schema`` (``None``: not a tenant's)."""
        slug = None if schema is None else tenancy.slug_of_schema(schema)
        if slug is None or not tenancy.lock_registry_row(conn, slug):
            return cls(conn, None)
        # After the lock: a migration adding the column has committed, or waits for us.
        return cls(conn, slug if tenancy.records_revisions(conn) else None)

    def __call__(
        self,
        ctx: MigrationContext,
        step: MigrationInfo,
        heads: Collection[Any],
        run_args: Mapping[str, Any],
    ) -> None:
        """Alembic's ``on_version_apply`` callback: ``heads`` are the schema's revisions now."""
        self.write(heads)

    def write(self, heads: Collection[str]) -> None:
        """Record ``heads`` (one revision, or none: base) as the tenant's revision."""
        if self.slug is not None:
            tenancy.record_revision(self.conn, self.slug, _single(heads))


def _single(heads: Collection[str]) -> str | None:
    if len(heads) > 1:
        raise MigrationError(f"a tenant schema is at several revisions at once: {sorted(heads)}")
    return next(iter(heads), None)


def record(conn: Connection, schema: str, revision: str | None) -> None:
    """Make the registry say ``schema`` is at ``revision``, in ``conn``'s transaction.

    For the paths that set a tenant's version row without Alembic (creation from the
    recording) and for a tenant found at its target whose copy says otherwise. Locks the
    registry row as :meth:`RevisionCopy.start` does; does nothing where that writes nothing.
    """
    RevisionCopy.of_schema(conn, schema).write([] if revision is None else [revision])
