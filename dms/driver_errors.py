"""Driver errors read by SQLSTATE and translated into :mod:`dms.errors`: the one place that does it.

What the database refuses reaches ``dms`` as SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError`
around a psycopg error, which carries the SQLSTATE, the name of the violated constraint and the
server's detail line. This module is the only one that reads them (:func:`sqlstate_of`,
:func:`constraint_of`), names every SQLSTATE that ``dms`` acts on, and holds the generic table
from SQLSTATE to domain error (:func:`translate`). Messages are never parsed.

Each layer keeps its own knowledge, as a mapping from a constraint name (or, for the rules that
triggers enforce, their SQLSTATE) to the domain error it means: the repositories for the tenant
tables (``folders_no_cycle`` is a clearer story than "check violation"), the job queue for its
tenant foreign keys, :mod:`dms.tenancy` for a registry that is not there. A layer passes that
mapping to :func:`translated` (the mapping first, then the generic table; what the repositories
do, in a savepoint, with :func:`dms.repositories.errors.translated`) or to :func:`refused` (the
mapping alone; any other driver error goes on as it was).

Why a module of its own, beside :mod:`dms.errors` rather than in it: :mod:`dms.errors` is the
catalogue of what ``dms`` raises, which the SQL-free domain imports; this module is what turns
the driver's errors into those, and imports nothing of ``dms`` but that catalogue, so that every
layer that meets the database can use it: the job queue sits below the repositories and must
not import them (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy.exc import DBAPIError

from dms.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    DmsError,
    InvariantViolation,
    NotFound,
    PermissionDenied,
    ValidationError,
)

#: A domain error, built on demand, for a refusal that the caller knows better.
ErrorFactory = Callable[[], DmsError]

UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"
#: PostgreSQL 18 reports a delete blocked by an ON DELETE RESTRICT key with this code (older
#: servers with 23503).
RESTRICT_VIOLATION = "23001"
#: Access control refused a change (docs/access.md), or a privilege is missing.
INSUFFICIENT_PRIVILEGE = "42501"
SERIALIZATION_FAILURE = "40001"
DEADLOCK_DETECTED = "40P01"
#: A statement naming a table that does not exist (a schema not migrated, a tenant not there).
UNDEFINED_TABLE = "42P01"
#: A statement naming a schema that does not exist (a tenant not there).
INVALID_SCHEMA_NAME = "3F000"
#: A statement stopped by ``statement_timeout``, ``pg_cancel_backend`` or Ctrl-C.
QUERY_CANCELED = "57014"
DUPLICATE_DATABASE = "42P04"
#: DROP DATABASE of a database that sessions still use.
OBJECT_IN_USE = "55006"
#: A database that does not exist.
INVALID_CATALOG_NAME = "3D000"
_INTEGRITY_CLASS = "23"
_DATA_EXCEPTION_CLASS = "22"


def sqlstate_of(exc: DBAPIError) -> str:
    """Return the SQLSTATE of a driver error ('' if the driver gave none)."""
    return str(getattr(exc.orig, "sqlstate", None) or "")


def constraint_of(exc: DBAPIError) -> str:
    """Return the name of the constraint that the statement violated ('' if none)."""
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "constraint_name", None) or "")


def _detail_of(exc: DBAPIError) -> str:
    """The server's detail line: what names the culprit when no constraint name came (Citus)."""
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "message_detail", None) or "")


def message_of(exc: DBAPIError) -> str:
    """The server's primary message, for errors whose message is ours (a trigger's RAISE)."""
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "message_primary", None) or "")


def refusal_of(exc: DBAPIError, constraints: Mapping[str, ErrorFactory]) -> DmsError | None:
    """Return the caller's own error for ``exc`` from ``constraints``, or ``None``.

    ``constraints`` are keyed by constraint name, or by SQLSTATE for refusals that come without
    one: the rules that triggers enforce (:data:`dms.schema.tenant.GUARD_SQLSTATES`; on Citus,
    an error raised on a worker reaches us with its SQLSTATE but without its constraint name),
    or a missing table.
    """
    for key in (constraint_of(exc), sqlstate_of(exc)):
        if key in constraints:
            return constraints[key]()
    return None


def translate(
    exc: DBAPIError, what: str, *, constraints: Mapping[str, ErrorFactory] | None = None
) -> DmsError | None:
    """Return the domain error for ``exc`` while working on ``what``, or ``None`` if unknown.

    ``what`` names the entity and the offending value (``"folder 'Invoices'"``). The caller's
    ``constraints`` (see :func:`refusal_of`) come first, then the generic table by SQLSTATE.
    """
    error = refusal_of(exc, constraints or {}) or permission_denied(exc)
    if error is not None:
        return error
    return _by_sqlstate(sqlstate_of(exc), constraint_of(exc) or _detail_of(exc), what)


_BY_SQLSTATE: Mapping[str, Callable[[str, str], DmsError]] = {
    UNIQUE_VIOLATION: lambda what, c: AlreadyExists(f"{what} already exists ({c})"),
    FOREIGN_KEY_VIOLATION: lambda what, c: NotFound(
        f"{what} refers to a row that does not exist ({c})"
    ),
    RESTRICT_VIOLATION: lambda what, c: InvariantViolation(f"{what} is still referenced ({c})"),
    SERIALIZATION_FAILURE: lambda what, _: ConcurrentUpdate(
        f"{what} collided with a concurrent transaction; retry"
    ),
    DEADLOCK_DETECTED: lambda what, _: ConcurrentUpdate(
        f"{what} collided with a concurrent transaction; retry"
    ),
}


def permission_denied(exc: DBAPIError) -> PermissionDenied | None:
    """The :class:`~dms.errors.PermissionDenied` that ``exc`` is, or ``None``."""
    if sqlstate_of(exc) != INSUFFICIENT_PRIVILEGE:
        return None
    return PermissionDenied(message_of(exc) or "permission denied")


def _by_sqlstate(sqlstate: str, constraint: str, what: str) -> DmsError | None:
    exact = _BY_SQLSTATE.get(sqlstate)
    if exact is not None:
        return exact(what, constraint)
    if sqlstate.startswith(_INTEGRITY_CLASS):
        return InvariantViolation(f"{what} was refused by the database ({constraint or sqlstate})")
    if sqlstate.startswith(_DATA_EXCEPTION_CLASS):
        return ValidationError(f"{what} has a value the database cannot store ({sqlstate})")
    return None


def translated(
    what: str, *, constraints: Mapping[str, ErrorFactory] | None = None
) -> AbstractContextManager[None]:
    """Raise the driver errors of a block as their domain errors (:func:`translate`).

    An error that :func:`translate` does not know goes on as it was.
    """
    return _raising(lambda exc: translate(exc, what, constraints=constraints))


def refused(constraints: Mapping[str, ErrorFactory]) -> AbstractContextManager[None]:
    """Raise the refusals of a block that ``constraints`` name as their domain errors.

    Only those (:func:`refusal_of`): every other driver error goes on as it was, for a layer
    whose statements the generic table does not fit (an unknown foreign key of the queue is a
    bug, not a :class:`~dms.errors.NotFound`).
    """
    return _raising(lambda exc: refusal_of(exc, constraints))


@contextmanager
def _raising(error_of: Callable[[DBAPIError], DmsError | None]) -> Iterator[None]:
    try:
        yield
    except DBAPIError as exc:
        error = error_of(exc)
        if error is None:
            raise
        raise error from exc
