"""What every repository shares: its connection, its tenant, the acting user, and how it runs SQL.

Every statement of a repository goes through :meth:`Repository._execute`, which is where an
unknown tenant is recognised (see there).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import Executable

from dms import tenancy
from dms.driver_errors import (
    INVALID_SCHEMA_NAME,
    UNDEFINED_TABLE,
    permission_denied,
    sqlstate_of,
)
from dms.errors import TenantNotFound, ValidationError
from dms.schema.ddl import execute_ddl

#: What a statement routed to the schema of an unregistered tenant fails with.
_MISSING_RELATION = frozenset({UNDEFINED_TABLE, INVALID_SCHEMA_NAME})

#: Parameters of one statement, or of one statement run for many rows.
Parameters = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


class Repository:
    """Base of the repositories: SQL on one tenant-routed connection, on behalf of a user."""

    def __init__(
        self,
        conn: Connection,
        *,
        tenant: str,
        user_id: uuid.UUID | None = None,
        system: str | None = None,
    ) -> None:
        """Work on ``conn`` (already routed to ``tenant``) as ``user_id`` or ``system``."""
        self._conn = conn
        self._tenant = tenant
        self._user_id = user_id
        self._system = system

    def _actor(self) -> uuid.UUID | None:
        """The user a new row names as its author; ``None`` for a system principal.

        The audit trail names the principal. Reading needs nobody; creating needs someone.
        """
        if self._user_id is None and self._system is None:
            raise ValidationError(
                "this change needs someone who acts: a user or a system principal; open the "
                "UnitOfWork with user_id or system"
            )
        return self._user_id

    def _execute(self, statement: Executable, parameters: Parameters = None) -> CursorResult[Any]:
        """Run ``statement``; if the tenant turns out not to exist, raise :class:`TenantNotFound`.

        Why here, and this way: a unit of work never asks the registry whether its tenant
        exists. That question would cost every unit of work a round trip (and the job worker
        opens one per job), while the answer is only ever "no" for a caller's mistake. Instead,
        a statement routed to a tenant that does not exist fails on its own, with SQLSTATE
        42P01 (no such table) since the tenant's schema is missing; only then is the registry
        asked, on a connection of its own (this one's transaction is aborted), so that a tenant
        that is registered but whose schema lacks a table (not migrated) keeps its own error.
        The success path costs nothing; a missing tenant costs one extra query.

        A change that access control refuses (docs/access.md) is
        :class:`~dms.errors.PermissionDenied`, whatever the statement.
        """
        try:
            return self._conn.execute(statement, parameters)
        except DBAPIError as exc:
            self._raise_recognised(exc)
            raise

    def _execute_command(self, command: sql.Composable) -> None:
        """Run ``command``, which Core cannot express (``SET CONSTRAINTS``), as :meth:`_execute`.

        Composed with :mod:`psycopg.sql` (names quoted by the driver), and with schema names
        spelled out: routing (``schema_translate_map``) applies to Core statements only.
        """
        try:
            execute_ddl(self._conn, command)
        except DBAPIError as exc:
            self._raise_recognised(exc)
            raise

    def _raise_recognised(self, exc: DBAPIError) -> None:
        """Raise what ``exc`` means if it is a missing tenant or a refused change."""
        if sqlstate_of(exc) in _MISSING_RELATION and not self._tenant_registered():
            raise TenantNotFound(f"tenant {self._tenant!r} does not exist") from exc
        denied = permission_denied(exc)
        if denied is not None:
            raise denied from exc

    def _tenant_registered(self) -> bool:
        with self._conn.engine.connect() as probe:
            try:
                tenancy.get_tenant(probe, self._tenant)
            except TenantNotFound:
                return False
        return True
