"""Index document_tags by (tag_id, document_id) instead of tag_id alone.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

Tenant only. "Documents having these tags" reads the links of a tag; with the document id in
the index that read is an index-only scan and never visits the links' heap. The new index
still leads with ``tag_id``, so the foreign key keeps its index and the old one goes. The
shared part is empty: the shared schema still moves to 0003, so the fleet reports one head.
"""

from __future__ import annotations

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)


def _upgrade_tenant(schema: str) -> None:
    op.create_index(
        op.f("ix_document_tags_tag_id_document_id"),
        "document_tags",
        ["tag_id", "document_id"],
        schema=schema,
    )
    op.drop_index(op.f("ix_document_tags_tag_id"), "document_tags", schema=schema)


def _downgrade_tenant(schema: str) -> None:
    op.create_index(op.f("ix_document_tags_tag_id"), "document_tags", ["tag_id"], schema=schema)
    op.drop_index(op.f("ix_document_tags_tag_id_document_id"), "document_tags", schema=schema)
