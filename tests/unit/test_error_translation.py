"""Driver errors become domain errors by SQLSTATE, never by message text."""

from __future__ import annotations

import psycopg.errors
import pytest
from sqlalchemy.exc import DBAPIError

from dms.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    DmsError,
    InvariantViolation,
    NotFound,
    ValidationError,
)
from dms.repositories.errors import translate


def _driver_error(cls: type[psycopg.Error]) -> DBAPIError:
    # The message deliberately names another error: only the SQLSTATE may decide.
    return DBAPIError("INSERT ...", {}, cls("duplicate key value violates unique constraint"))


@pytest.mark.parametrize(
    ("driver", "domain"),
    [
        (psycopg.errors.UniqueViolation, AlreadyExists),
        (psycopg.errors.ForeignKeyViolation, NotFound),
        (psycopg.errors.RestrictViolation, InvariantViolation),
        (psycopg.errors.CheckViolation, InvariantViolation),
        (psycopg.errors.NotNullViolation, InvariantViolation),
        (psycopg.errors.SerializationFailure, ConcurrentUpdate),
        (psycopg.errors.DeadlockDetected, ConcurrentUpdate),
        (psycopg.errors.NumericValueOutOfRange, ValidationError),
    ],
)
def test_sqlstate_decides_the_domain_error(
    driver: type[psycopg.Error], domain: type[DmsError]
) -> None:
    error = translate(_driver_error(driver), "document 'x'")
    assert type(error) is domain
    assert "document 'x'" in str(error)


def test_unknown_sqlstate_is_not_translated() -> None:
    assert translate(_driver_error(psycopg.errors.UndefinedTable), "document 'x'") is None
