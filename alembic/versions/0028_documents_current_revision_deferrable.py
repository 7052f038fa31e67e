"""The documents' key to their current revision is deferrable: ``fk_documents_current_revision``.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07

Tenant only. An import's batch inserts its documents already pointing at their first
revisions, then the revisions, with this key deferred in between (``SET CONSTRAINTS ...
DEFERRED``, then ``IMMEDIATE`` before the batch goes on: dms.repositories.imports). Without
it, the documents went in without a current revision and an ``UPDATE`` pointed them at it,
whose triggers rebuilt each document's search rows a second time, checked the edit right again
and recorded an extra audit event (bench/results/import.md). The key stays ``INITIALLY
IMMEDIATE``: every other statement is checked as before, at its end.

On plain PostgreSQL ``ALTER CONSTRAINT`` changes the catalog only: no row is read, and
``documents`` is locked (ACCESS EXCLUSIVE) for that moment. Citus refuses ``ALTER CONSTRAINT``
on its tables, so there the key is dropped and added again (two statements: Citus takes no
other subcommand beside an ``ADD CONSTRAINT``), which checks every document of the tenant
once. The downgrade makes the key ``NOT DEFERRABLE`` again, the same way. The shared part is
empty.
"""

from __future__ import annotations

from psycopg import sql

from alembic import op
from dms import citus
from dms.migrations import MigrationScope
from dms.schema.ddl import execute_ddl

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | None = None
depends_on: str | None = None

KEY = "fk_documents_current_revision"


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _make_key(scope.schema, deferrable=True)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _make_key(scope.schema, deferrable=False)


def _make_key(schema: str, *, deferrable: bool) -> None:
    bind = op.get_bind()
    if citus.is_citus(bind):
        op.drop_constraint(KEY, "documents", type_="foreignkey", schema=schema)
        op.create_foreign_key(
            KEY,
            "documents",
            "file_revisions",
            ["id", "current_revision_id"],
            ["document_id", "id"],
            source_schema=schema,
            referent_schema=schema,
            deferrable=deferrable,
            initially="IMMEDIATE" if deferrable else None,
        )
        return
    execute_ddl(
        bind,
        sql.SQL("ALTER TABLE {}.{} ALTER CONSTRAINT {} {}").format(
            sql.Identifier(schema),
            sql.Identifier("documents"),
            sql.Identifier(KEY),
            sql.SQL("DEFERRABLE INITIALLY IMMEDIATE" if deferrable else "NOT DEFERRABLE"),
        ),
    )
