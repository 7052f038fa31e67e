"""The application role can create no object (findings 1 and 3 of the review,
docs/security.md): no operator or function in a tenant's schema that a definer function would
resolve to, no temporary table whose trigger would run inside the tenant's triggers' trust, no
schema, and nothing in the IAM's schema."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from dms import roles
from dms.testing.roles import APPLICATION_ROLE
from tests.adversarial.conftest import World, refused_as


@pytest.mark.parametrize(
    "statement",
    [
        # Finding 1: an exact-match operator planted before pg_catalog's candidates.
        "CREATE FUNCTION {s}.band(smallint, integer) RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "CREATE OPERATOR {s}.& (LEFTARG = smallint, RIGHTARG = integer, FUNCTION = int4and)",
        # Finding 3: a temporary table, whose trigger would run at a trigger depth above 0.
        "CREATE TEMPORARY TABLE lure (x integer)",
        "CREATE SCHEMA lair",
        "CREATE TABLE public.lure (x integer)",
        "CREATE TABLE {s}.lure (x integer)",
        "CREATE TRIGGER lure AFTER INSERT ON {s}.folders FOR EACH ROW"
        " EXECUTE FUNCTION {s}.audit_row('folder', '')",
    ],
)
def test_the_application_role_creates_nothing(
    app_engine: Engine, world: World, statement: str
) -> None:
    assert refused_as(app_engine, world, world.eve, statement) == "42501"


def test_dms_check_names_a_privilege_to_create_given_back(
    engine: Engine, app_engine: Engine
) -> None:
    with engine.begin() as conn:
        database = conn.exec_driver_sql("SELECT current_database()").scalar_one()
        conn.exec_driver_sql(f'GRANT TEMPORARY ON DATABASE "{database}" TO PUBLIC')
    try:
        with engine.connect() as conn:
            found = [str(p) for p in roles.problems(conn, []) if p.role == APPLICATION_ROLE]
        assert (
            f"role {APPLICATION_ROLE} holds, beyond its need, TEMPORARY on database {database}"
            in found
        )
    finally:
        roles.setup(engine, APPLICATION_ROLE)
    with engine.connect() as conn:
        assert [p for p in roles.problems(conn, []) if p.role == APPLICATION_ROLE] == []
