"""The trash of a tenant, newest first, read through an index.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05

Tenant only: ``ix_documents_trash`` on ``documents (deleted_at, id)`` for the documents in the
trash (a partial index: live documents, nearly all of them, are not in it), read backwards for
the most recently deleted first. The trash view
(:meth:`dms.repositories.documents.DocumentRepository.trash`) pages it by keyset, and
``dms trash purge --older-than`` finds what has been there long enough, without reading the
tenant's live documents.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        op.create_index(
            "ix_documents_trash",
            "documents",
            ["deleted_at", "id"],
            schema=scope.schema,
            postgresql_where=sa.text("deleted_at IS NOT NULL"),
        )


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        op.drop_index("ix_documents_trash", "documents", schema=scope.schema)
