"""The tenant guards refuse with SQLSTATEs of their own, which Citus passes on.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

Tenant only. The two trigger functions of 0001 (gap-free append-only revisions; the acyclic
folder tree with its depth limit) refused with ``check_violation`` and named the rule in the
error's constraint field. On a Citus cluster the refusal is raised on the worker that holds the
tenant, and the coordinator passes on its SQLSTATE, message, detail, hint and context but not
its constraint name: nothing could tell a cycle from a too deep tree. Each rule now has its own
SQLSTATE in the integrity class 23 (implementation-defined subclass ``M``), and still names its
constraint where PostgreSQL reports it:

=========  ===============================
``23M01``  ``file_revisions_gap_free``
``23M02``  ``file_revisions_append_only``
``23M03``  ``folders_no_cycle``
``23M04``  ``folders_max_depth``
=========  ===============================

The rules themselves are unchanged: the new bodies are 0001's with only the error codes
replaced, and the downgrade puts 0001's bodies back. The shared part is empty.
"""

from __future__ import annotations

from types import ModuleType

from psycopg import sql

from alembic import op
from dms.errors import MigrationError
from dms.migrations import MigrationScope
from dms.schema.ddl import execute_ddl

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

#: Frozen copy of dms.schema.tenant.GUARD_SQLSTATES at this revision.
SQLSTATES = {
    "file_revisions_gap_free": "23M01",
    "file_revisions_append_only": "23M02",
    "folders_no_cycle": "23M03",
    "folders_max_depth": "23M04",
}
#: Each guard function and the name of its body in revision 0001.
FUNCTIONS = {"file_revisions_guard": "REVISION_GUARD", "folders_guard": "FOLDER_GUARD"}


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        for function, body in FUNCTIONS.items():
            _replace(scope.schema, function, _with_own_sqlstates(_first_bodies()[body]))


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        for function, body in FUNCTIONS.items():
            _replace(scope.schema, function, _first_bodies()[body])


def _first_bodies() -> dict[str, str]:
    """The guard bodies as revision 0001 created them (that revision never changes)."""
    module: ModuleType = op.get_context().script.get_revision("0001").module  # type: ignore[union-attr]
    return {name: str(getattr(module, name)) for name in FUNCTIONS.values()}


def _with_own_sqlstates(body: str) -> str:
    for constraint, sqlstate in SQLSTATES.items():
        before = f"ERRCODE = 'check_violation', CONSTRAINT = '{constraint}'"
        after = f"ERRCODE = '{sqlstate}', CONSTRAINT = '{constraint}'"
        body = body.replace(before, after)
    if "check_violation" in body:
        raise MigrationError("a guard of revision 0001 refuses in a way this revision missed")
    return body


def _replace(schema: str, function: str, body: str) -> None:
    execute_ddl(
        op.get_bind(),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}.{}() RETURNS trigger LANGUAGE plpgsql "
            "SET search_path = {}, pg_temp AS {}"
        ).format(
            sql.Identifier(schema),
            sql.Identifier(function),
            sql.Identifier(schema),
            sql.Literal(body),
        ),
    )
