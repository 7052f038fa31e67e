"""The registry records each tenant's revision: fleet status and a no-op upgrade read one table.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

Shared only: ``dms.tenants.revision``, the Alembic revision of the tenant's schema (``NULL``:
base, the schema holds no revision). Reading 10,000 tenant version tables took a minute on a
catalog of a gigabyte; the registry answers in one query. Every path that moves a tenant's own
``alembic_version`` writes this copy in the same transaction (:mod:`dms.migrations.registry`),
so it never says what the schema does not; ``dms check`` still compares the two.

The upgrade fills the new column from every registered tenant's version table, in the same
transaction as it adds the column: there is no state in which a tenant's revision is unknown.
The column is added first, under the ACCESS EXCLUSIVE lock of ``ALTER TABLE``, which every
tenant migration waits for (each locks its registry row first), so no tenant moves between
what is read here and the commit. Reading a version table locks it until the transaction ends,
and 10,000 of them (twice: table and index) would overrun the server's lock table
(``max_locks_per_transaction``): each batch of :data:`SCHEMAS_PER_READ` is read in a savepoint
that is rolled back, which releases its locks; what was read is written afterwards.

The tenant part is empty: tenant schemas still move to 0007, so every schema of the fleet
reports one head. The downgrade drops the column.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

#: Version tables read per savepoint (two locks each: the table and its primary key).
SCHEMAS_PER_READ = 500

_VERSION_TABLE = "alembic_version"
_pg_class = sa.table("pg_class", sa.column("relname"), sa.column("relnamespace"))
_pg_namespace = sa.table("pg_namespace", sa.column("oid"), sa.column("nspname"))


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.add_column("tenants", sa.Column("revision", sa.Text, nullable=True), schema=scope.schema)
        _backfill(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.drop_column("tenants", "revision", schema=scope.schema)


def _registry(schema: str) -> sa.TableClause:
    """``dms.tenants`` as it is at this revision (a frozen copy, not dms.schema.shared)."""
    return sa.table(
        "tenants",
        sa.column("slug", sa.Text),
        sa.column("schema_name", sa.Text),
        sa.column("revision", sa.Text),
        schema=schema,
    )


def _backfill(schema: str) -> None:
    bind = op.get_bind()
    registry = _registry(schema)
    schemas = {
        str(name): str(slug)
        for name, slug in bind.execute(sa.select(registry.c.schema_name, registry.c.slug))
    }
    readable = sorted(set(schemas) & _with_version_table(bind))
    for start in range(0, len(readable), SCHEMAS_PER_READ):
        found = _read_versions(bind, readable[start : start + SCHEMAS_PER_READ])
        if found:
            values = sa.values(
                sa.column("slug", sa.Text), sa.column("revision", sa.Text), name="found"
            ).data([(schemas[name], version) for name, version in found])
            bind.execute(
                sa.update(registry)
                .where(registry.c.slug == values.c.slug)
                .values(revision=values.c.revision)
            )


def _with_version_table(bind: sa.Connection) -> set[str]:
    query = (
        sa.select(_pg_namespace.c.nspname)
        .join_from(_pg_class, _pg_namespace, _pg_class.c.relnamespace == _pg_namespace.c.oid)
        .where(_pg_class.c.relname == _VERSION_TABLE)
    )
    return set(bind.scalars(query))


def _read_versions(bind: sa.Connection, schemas: list[str]) -> list[tuple[str, str]]:
    """The revision of each of ``schemas`` that has one; their locks released again."""
    selects = [
        sa.select(
            sa.literal(name, sa.Text).label("schema_name"),
            sa.table(_VERSION_TABLE, sa.column("version_num", sa.Text), schema=name).c.version_num,
        )
        for name in schemas
    ]
    savepoint = bind.begin_nested()
    try:
        return [(name, version) for name, version in bind.execute(sa.union_all(*selects))]
    finally:
        # Rolled back, not released: a savepoint rolled back gives up the locks taken in it.
        savepoint.rollback()
