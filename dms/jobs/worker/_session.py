"""A connection held by one part of a worker for its own statements, replaced after an error.

A held connection pays neither a pool checkout nor a pre-ping per statement. Autocommit (the
completer's and the renewer's): each statement is its own transaction, one round trip.
Without it (the claimer's), the caller begins and commits its transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class HeldSession:
    """One connection, opened on first use and dropped after a database error."""

    def __init__(self, engine: Engine, *, autocommit: bool = True) -> None:
        """Hold connections of ``engine``; open none yet."""
        self._engine = engine
        self._autocommit = autocommit
        self._conn: Connection | None = None

    def run(self, statement: Callable[[Connection], _T]) -> _T:
        """Run ``statement`` on the held connection (opened if needed); drop it on errors."""
        if self._conn is None:
            conn = self._engine.connect()
            self._conn = (
                conn.execution_options(isolation_level="AUTOCOMMIT") if self._autocommit else conn
            )
        try:
            return statement(self._conn)
        except BaseException:
            # Whatever broke, the connection's state is unknown: never reuse it.
            self.close()
            raise

    def close(self) -> None:
        """Give the connection back (a broken one is discarded by the pool)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except sa.exc.DBAPIError as exc:
                log.debug("closing a broken connection: %s", exc.orig)
