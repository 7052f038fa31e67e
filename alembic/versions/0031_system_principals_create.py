"""A system principal creates objects: the columns naming a row's author may be ``NULL``.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07

Tenant only. docs/access.md says a system principal holds every right, and that an object it
creates has no owner; yet ``created_by`` (folders, documents, tags, metadata fields),
``uploaded_by`` (file revisions) and ``imported_by`` (import provenance) were ``NOT NULL``, so
a job handler acting as ``system:worker`` could not define a field or file a document (the
library refused: "this change needs a user"). Now ``NULL`` there means a system principal made
the row; the audit trail names which. The keys to ``known_users`` stay.

``DROP NOT NULL`` changes the catalog only (no row is read). The downgrade sets ``NOT NULL``
again, which needs every row to name a user: while rows made by a system principal remain it
refuses with :class:`~dms.errors.MigrationError`, naming the tables and how many rows, and the
tenant is left as it was (give those rows an author, or delete them, then downgrade).
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.errors import MigrationError
from dms.migrations import MigrationScope

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | None = None
depends_on: str | None = None

#: (table, column) of every author column.
AUTHORS = (
    ("folders", "created_by"),
    ("documents", "created_by"),
    ("file_revisions", "uploaded_by"),
    ("import_provenance", "imported_by"),
    ("tags", "created_by"),
    ("metadata_fields", "created_by"),
)


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        for table, column in AUTHORS:
            op.alter_column(table, column, nullable=True, schema=scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        return
    _require_authors(scope.schema)
    for table, column in AUTHORS:
        op.alter_column(table, column, nullable=False, schema=scope.schema)


def _require_authors(schema: str) -> None:
    bind = op.get_bind()
    unnamed = []
    for table, column in AUTHORS:
        rows = sa.table(table, sa.column(column), schema=schema)
        count = bind.scalar(
            sa.select(sa.func.count()).select_from(rows).where(rows.c[column].is_(None))
        )
        if count:
            unnamed.append(f"{count} in {table}")
    if unnamed:
        raise MigrationError(
            f"cannot make the author columns of {schema} NOT NULL again: rows made by a system "
            f"principal name no user ({', '.join(unnamed)}); give them an author or delete "
            "them, then downgrade"
        )
