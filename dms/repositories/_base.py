"""What every repository shares: its connection and the acting user."""

from __future__ import annotations

import uuid

from sqlalchemy.engine import Connection

from dms.errors import ValidationError


class Repository:
    """Base of the repositories: SQL on one tenant-routed connection, on behalf of a user."""

    def __init__(self, conn: Connection, *, user_id: uuid.UUID | None = None) -> None:
        """Work on ``conn`` (already routed to a tenant) as ``user_id``."""
        self._conn = conn
        self._user_id = user_id

    def _actor(self) -> uuid.UUID:
        # Writes record who made them; reading needs no user.
        if self._user_id is None:
            raise ValidationError("this change needs a user: open the UnitOfWork with user_id")
        return self._user_id
