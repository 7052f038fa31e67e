"""Translation of database errors into :mod:`dms.errors`, by SQLSTATE, in one place.

Repositories run every statement that the database may refuse inside :func:`translated`. The
psycopg error under SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError` carries the SQLSTATE and
the name of the violated constraint; messages are never parsed. A caller can name the domain
error of a particular constraint (``folders_no_cycle`` is a clearer story than "check
violation"), by its name or, for the rules that triggers enforce, by their own SQLSTATE (a
Citus coordinator passes on a worker's SQLSTATE, message and detail, not the constraint name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from dms.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    DmsError,
    InvariantViolation,
    NotFound,
    ValidationError,
)

#: A domain error, built from a message, for a constraint that the caller knows better.
ErrorFactory = Callable[[], DmsError]

_UNIQUE_VIOLATION = "23505"
_FOREIGN_KEY_VIOLATION = "23503"
#: PostgreSQL 18 reports a delete blocked by an ON DELETE RESTRICT key with this code (older
#: servers with 23503).
_RESTRICT_VIOLATION = "23001"
_SERIALIZATION_FAILURE = "40001"
_DEADLOCK_DETECTED = "40P01"
_INTEGRITY_CLASS = "23"
_DATA_EXCEPTION_CLASS = "22"


def sqlstate_of(exc: DBAPIError) -> str:
    """Return the SQLSTATE of a driver error ('' if the driver gave none)."""
    return str(getattr(exc.orig, "sqlstate", None) or "")


def constraint_of(exc: DBAPIError) -> str:
    """Return the name of the constraint that the statement violated ('' if none)."""
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "constraint_name", None) or "")


def translate(
    exc: DBAPIError, what: str, *, constraints: Mapping[str, ErrorFactory] | None = None
) -> DmsError | None:
    """Return the domain error for ``exc`` while working on ``what``, or ``None`` if unknown.

    ``what`` names the entity and the offending value (``"folder 'Invoices'"``).
    ``constraints`` are keyed by constraint name, or by SQLSTATE for the rules that triggers
    enforce (:data:`dms.schema.tenant.GUARD_SQLSTATES`): on Citus, an error raised on a
    worker reaches us with its SQLSTATE but without its constraint name.
    """
    constraint, sqlstate = constraint_of(exc), sqlstate_of(exc)
    for key in (constraint, sqlstate):
        if constraints and key in constraints:
            return constraints[key]()
    return _by_sqlstate(sqlstate, constraint or _detail_of(exc), what)


def _detail_of(exc: DBAPIError) -> str:
    """The server's detail line: what names the culprit when no constraint name came (Citus)."""
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "message_detail", None) or "")


_BY_SQLSTATE: Mapping[str, Callable[[str, str], DmsError]] = {
    _UNIQUE_VIOLATION: lambda what, c: AlreadyExists(f"{what} already exists ({c})"),
    _FOREIGN_KEY_VIOLATION: lambda what, c: NotFound(
        f"{what} refers to a row that does not exist ({c})"
    ),
    _RESTRICT_VIOLATION: lambda what, c: InvariantViolation(f"{what} is still referenced ({c})"),
    _SERIALIZATION_FAILURE: lambda what, _: ConcurrentUpdate(
        f"{what} collided with a concurrent transaction; retry"
    ),
    _DEADLOCK_DETECTED: lambda what, _: ConcurrentUpdate(
        f"{what} collided with a concurrent transaction; retry"
    ),
}


def _by_sqlstate(sqlstate: str, constraint: str, what: str) -> DmsError | None:
    exact = _BY_SQLSTATE.get(sqlstate)
    if exact is not None:
        return exact(what, constraint)
    if sqlstate.startswith(_INTEGRITY_CLASS):
        return InvariantViolation(f"{what} was refused by the database ({constraint or sqlstate})")
    if sqlstate.startswith(_DATA_EXCEPTION_CLASS):
        return ValidationError(f"{what} has a value the database cannot store ({sqlstate})")
    return None


@contextmanager
def translated(
    conn: Connection,
    what: str,
    *,
    constraints: Mapping[str, ErrorFactory] | None = None,
    savepoint: bool = True,
) -> Iterator[None]:
    """Run a block in a savepoint and raise database errors as domain errors.

    The savepoint keeps the unit of work usable after a refused statement: only the block is
    undone, and the caller may go on or roll back. Bulk writes pass ``savepoint=False``: two
    round trips fewer per statement, and a refusal leaves the transaction aborted, to be
    rolled back (what an import does with a batch that fails anyway).
    """
    try:
        if savepoint:
            with conn.begin_nested():
                yield
        else:
            yield
    except DBAPIError as exc:
        error = translate(exc, what, constraints=constraints)
        if error is None:
            raise
        raise error from exc
