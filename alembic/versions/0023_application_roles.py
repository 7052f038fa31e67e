"""The roles the application connects as: ``dms.application_roles``.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07

Shared only. ``dms roles setup --app ROLE`` records the application's role here (docs/operations.md,
"Roles"); creating and migrating a tenant grant it the tenant's schema in the same transaction
(:mod:`dms.roles`). The tenant part is empty: tenant schemas still move to 0023, so every schema
of the fleet reports one head. The downgrade drops the table (the grants made stay: they are
the catalog's, and a new setup finds them).
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.migrations import MigrationScope

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        # A frozen copy of dms.schema.shared.application_roles at this revision.
        op.create_table(
            "application_roles",
            sa.Column("role_name", sa.Text, nullable=False),
            sa.Column(
                "created_at",
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.func.now(),
            ),
            sa.PrimaryKeyConstraint("role_name", name="pk_application_roles"),
            schema=scope.schema,
        )


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        op.drop_table("application_roles", schema=scope.schema)
