"""Driver errors become domain errors by SQLSTATE and constraint name, never by message text."""

from __future__ import annotations

from types import SimpleNamespace

import psycopg.errors
import pytest
from sqlalchemy.exc import DBAPIError

from dms.driver_errors import ErrorFactory, refused, translate, translated
from dms.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    DmsError,
    InvariantViolation,
    NotFound,
    NotMigrated,
    TenantNotFound,
    ValidationError,
)
from dms.jobs._translation import TENANT_FOREIGN_KEYS, tenant_dropped


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


class _Refusal(Exception):
    """A driver error as psycopg gives it, with the fields a test needs set."""

    def __init__(self, sqlstate: str, constraint_name: str | None = None) -> None:
        super().__init__("check constraint violated")
        self.sqlstate = sqlstate
        self.diag = SimpleNamespace(constraint_name=constraint_name, message_detail=None)


def _refused_by(sqlstate: str, constraint_name: str | None = None) -> DBAPIError:
    return DBAPIError("UPDATE ...", {}, _Refusal(sqlstate, constraint_name))


def test_the_callers_constraint_comes_before_the_table() -> None:
    """By constraint name, or by SQLSTATE where none comes (a trigger's rule on Citus)."""
    clearer: dict[str, ErrorFactory] = {
        "ck_folders_no_cycle": lambda: ValidationError("a cycle"),
        "23M03": NotMigrated,
    }
    by_name = translate(
        _refused_by("23514", "ck_folders_no_cycle"), "folder 'x'", constraints=clearer
    )
    by_sqlstate = translate(_refused_by("23M03"), "folder 'x'", constraints=clearer)
    other = translate(_refused_by("23514", "ck_other"), "folder 'x'", constraints=clearer)
    assert (type(by_name), type(by_sqlstate), type(other)) == (
        ValidationError,
        NotMigrated,
        InvariantViolation,
    )
    assert str(other) == "folder 'x' was refused by the database (ck_other)"


def test_refused_raises_only_what_the_caller_names() -> None:
    """The generic table stays out: any other driver error goes on as it was."""
    named = {"fk_jobs_tenant": lambda: TenantNotFound("dropped")}
    with pytest.raises(TenantNotFound) as raised, refused(named):
        raise _refused_by("23503", "fk_jobs_tenant")
    assert isinstance(raised.value.__cause__, DBAPIError)
    unknown = _refused_by("23503", "fk_other")
    with pytest.raises(DBAPIError) as passed, refused(named):
        raise unknown
    assert passed.value is unknown


def test_translated_raises_the_domain_error_from_the_driver_error() -> None:
    unknown = _driver_error(psycopg.errors.UndefinedTable)
    with pytest.raises(AlreadyExists) as raised, translated("tag 'x'"):
        raise _driver_error(psycopg.errors.UniqueViolation)
    assert isinstance(raised.value.__cause__, DBAPIError)
    with pytest.raises(DBAPIError) as passed, translated("tag 'x'"):
        raise unknown
    assert passed.value is unknown


@pytest.mark.parametrize("foreign_key", sorted(TENANT_FOREIGN_KEYS))
def test_a_queue_row_whose_tenant_went_is_tenant_not_found(foreign_key: str) -> None:
    """The race the queue's statements leave: the tenant dropped after their check."""
    dropped = tenant_dropped("tenant 'acme' was dropped")
    with pytest.raises(TenantNotFound, match=r"^tenant 'acme' was dropped$"), refused(dropped):
        raise _refused_by("23503", foreign_key)
