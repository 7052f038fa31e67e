"""The queue's Core statements, compiled once, run on the psycopg connection under SQLAlchemy's.

For the hottest paths only, where SQLAlchemy's own execution is a sizeable share of the call:
``conn.execute`` looks the statement up in the compiled cache by its cache key (a walk of the
whole expression), builds an execution context, processes the parameters and wraps the cursor
in a result, about 60 µs of the 0.4 ms an enqueue of one job takes on an autocommit connection
(bench/README.md). :func:`execute` does what remains necessary: the statement is
compiled once from the same Core expression, the SQLAlchemy connection's transaction is begun
as its own ``execute`` would begin it, and driver errors come out as SQLAlchemy's
:class:`~sqlalchemy.exc.DBAPIError`, as they would from ``conn.execute``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms.config import SHARED_SCHEMA


@functools.cache
def compiled(statement: sa.Executable, dialect: sa.Dialect) -> sa.Compiled:
    """``statement`` compiled once for ``dialect``, for execution on the driver connection."""
    return sa.ClauseElement.compile(statement, dialect=dialect)  # type: ignore[arg-type]


def execute(
    conn: Connection, statement: sa.Executable, params: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """The rows of ``statement`` run with ``params`` in ``conn``'s transaction.

    As ``conn.execute(statement, params).all()`` would return them (as tuples), and with the
    same effects on ``conn``: it begins ``conn``'s transaction if none is (autobegin), so that
    ``conn.commit()`` commits the statement, and a database error raises
    :class:`~sqlalchemy.exc.DBAPIError` (invalidating ``conn`` if its connection broke) and
    leaves the transaction for the caller to roll back. Prepared statements follow the
    connection's ``prepare_threshold``, as SQLAlchemy's execution does. ``handle_error``
    listeners are not called (``dms.db``'s own concerns connecting, which this does not do).
    SQLAlchemy runs the statement itself (slower, same result) when :func:`direct` says no.
    """
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection) or not direct(conn):
        return [tuple(row) for row in conn.execute(statement, params)]
    if conn.get_transaction() is None:
        conn.begin()  # what conn.execute's autobegin does: conn.commit() now commits
    query = compiled(statement, conn.dialect)
    values = query.construct_params(params)
    try:
        with driver.cursor() as cursor:
            cursor.execute(query.string, values)
            return cursor.fetchall()
    except psycopg.Error as exc:
        if driver.broken:  # as SQLAlchemy does for its own statements: the pool replaces it
            conn.invalidate(exc)
        raise sa.exc.DBAPIError.instance(
            query.string, values, exc, psycopg.Error, connection_invalidated=driver.broken
        ) from exc


def direct(conn: Connection) -> bool:
    """Whether a statement may bypass SQLAlchemy's execution on ``conn`` unnoticed.

    Not when something watches statements through SQLAlchemy (``before_cursor_execute`` or
    ``after_cursor_execute`` listeners, such as tracing; statement logging), when the
    connection's ``schema_translate_map`` routes the shared schema (the compiled text names
    it), or when its transaction can no longer be used (``conn.execute`` raises then).
    """
    transaction = conn.get_transaction()
    dispatch = conn.dispatch
    return not (
        dispatch.before_cursor_execute
        or dispatch.after_cursor_execute
        or conn.engine.logger.isEnabledFor(logging.INFO)
        or SHARED_SCHEMA in (conn.get_execution_options().get("schema_translate_map") or ())
        or (transaction is not None and not transaction.is_active)
    )
