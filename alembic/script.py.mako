"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa
${imports if imports else ""}
from dms.migrations import MigrationScope

revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}
branch_labels: str | None = None
depends_on: str | None = None


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema, scope.users_schema)
    else:
        _upgrade_shared(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)
    else:
        _downgrade_shared(scope.schema)


def _upgrade_shared(schema: str) -> None:
    pass


def _downgrade_shared(schema: str) -> None:
    pass


def _upgrade_tenant(schema: str, users_schema: str) -> None:
    pass


def _downgrade_tenant(schema: str) -> None:
    pass
