"""The tenants' GIN indexes keep no pending list: ``fastupdate = off``.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-08

Tenant only. With a pending list (PostgreSQL's default), a GIN index puts new entries in a list
that every scan of the index reads whole, until a vacuum (or the list's 4 MB limit) merges
them into the tree; the planner prices an index scan accordingly. A tenant whose search rows
hold large documents and whose tables had been analyzed but not yet vacuumed (as autovacuum
leaves a table that only grows for a long while) then read every search row for every search:
125-170 ms instead of 14 ms on the documentation tree of a Debian system (issue 46). Without a
pending list the index is always whole, and its scans are priced as what they read.

The upgrade sets the option on ``ix_document_search_terms_filters``,
``ix_document_search_own_scope`` and ``ix_documents_title_trgm``, then merges what their
pending lists held (``gin_clean_pending_list``; on Citus the tenant's node keeps them until its
next vacuum: the function reads the shard, which the coordinator does not hold). The downgrade
resets the option (PostgreSQL's default again); a pending list then starts anew.
"""

from __future__ import annotations

import sqlalchemy as sa
from psycopg import sql

from alembic import op
from dms import citus
from dms.migrations import MigrationScope
from dms.migrations.catalog import PG_CLASS, PG_NAMESPACE
from dms.schema.ddl import execute_ddl

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | None = None
depends_on: str | None = None

INDEXES = (
    "ix_document_search_terms_filters",
    "ix_document_search_own_scope",
    "ix_documents_title_trgm",
)


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        return
    bind = op.get_bind()
    for index in INDEXES:
        execute_ddl(bind, _alter(scope.schema, index, "SET (fastupdate = off)"))
    if not citus.is_citus(bind):
        bind.execute(
            sa.select(sa.func.gin_clean_pending_list(PG_CLASS.c.oid))
            .join_from(PG_CLASS, PG_NAMESPACE, PG_NAMESPACE.c.oid == PG_CLASS.c.relnamespace)
            .where(PG_NAMESPACE.c.nspname == scope.schema, PG_CLASS.c.relname.in_(INDEXES))
        )


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        for index in INDEXES:
            execute_ddl(op.get_bind(), _alter(scope.schema, index, "RESET (fastupdate)"))


def _alter(schema: str, index: str, change: str) -> sql.Composed:
    return sql.SQL("ALTER INDEX {}.{} {}").format(
        sql.Identifier(schema), sql.Identifier(index), sql.SQL(change)
    )
