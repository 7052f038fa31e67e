"""The application's role (docs/operations.md, "Roles"): made or adopted by ``dms roles setup``,
granted exactly what it needs on the shared schema and every tenant, granted each tenant made
or migrated later in the same transaction, checked by ``dms check``, and refused when
PostgreSQL would not hold it to the policies. Setup runs as the suite's owner role; what the
grants allow is tried as the application role itself.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine

from dms import migrations, provisioning, roles, tenancy
from dms.cli import main
from dms.config import SHARED_SCHEMA
from dms.driver_errors import INSUFFICIENT_PRIVILEGE, sqlstate_of
from dms.errors import ValidationError
from dms.migrations.drift import check_drift
from dms.roles import PrivilegeProblem, RoleRefused
from dms.schema.ddl import execute_ddl
from dms.testing.roles import APPLICATION_ROLE, application_engine
from dms.uow import UnitOfWork
from tests.conftest import new_slug, new_user


@pytest.fixture
def app_engine(engine: Engine, tenant: str) -> Iterator[Engine]:
    """The application's role, set up as a deployment does (tenant: made before the setup)."""
    application = application_engine(engine)
    yield application
    application.dispose()


def _problems(engine: Engine, *slugs: str) -> list[PrivilegeProblem]:
    with engine.connect() as conn:
        return [
            p
            for p in roles.problems(conn, [tenancy.schema_name(s) for s in slugs])
            if p.role == APPLICATION_ROLE
        ]


def _run(engine: Engine, statement: sql.Composable) -> None:
    with engine.begin() as conn:
        execute_ddl(conn, statement)


def test_setup_grants_exactly_what_the_application_needs(
    engine: Engine, app_engine: Engine, tenant: str
) -> None:
    assert _problems(engine, tenant) == []
    with UnitOfWork(app_engine, tenant=tenant, user_id=new_user(engine)) as uow:
        folder = uow.folders.add(name="Inbox")
        uow.commit()
    with app_engine.connect() as conn:
        assert tenancy.registered_slugs(conn, [tenant]) == {tenant}
        conn.rollback()
        # No DDL, no writes to the registry or a version table.
        for refused in (
            f'CREATE TABLE "{tenancy.schema_name(tenant)}".x (id int)',
            f"DELETE FROM {SHARED_SCHEMA}.tenants",
            f'DELETE FROM "{tenancy.schema_name(tenant)}".alembic_version',
            f'TRUNCATE "{tenancy.schema_name(tenant)}".folders',
        ):
            with pytest.raises(sa.exc.ProgrammingError) as caught, conn.begin():
                conn.exec_driver_sql(refused)
            assert sqlstate_of(caught.value) == INSUFFICIENT_PRIVILEGE
    with UnitOfWork(engine, tenant=tenant, system="operator") as uow:
        assert uow.folders.get(folder.id).name == "Inbox"


def test_a_tenant_made_after_setup_is_granted_in_the_same_transaction(
    engine: Engine, app_engine: Engine
) -> None:
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    try:
        assert _problems(engine, slug) == []
        with UnitOfWork(app_engine, tenant=slug, user_id=new_user(engine)) as uow:
            uow.tags.add(name="granted")
            uow.commit()
    finally:
        provisioning.drop_tenant(engine, slug)


def test_a_privilege_missing_or_in_excess_is_named_and_setup_makes_it_exact(
    engine: Engine, app_engine: Engine, tenant: str
) -> None:
    schema = sql.Identifier(tenancy.schema_name(tenant))
    role = sql.Identifier(APPLICATION_ROLE)
    _run(engine, sql.SQL("GRANT TRUNCATE ON {}.documents TO {}").format(schema, role))
    _run(engine, sql.SQL("REVOKE DELETE ON {}.tags FROM {}").format(schema, role))
    _run(engine, sql.SQL("GRANT CREATE ON SCHEMA {} TO {}").format(schema, role))

    found = {str(p) for p in _problems(engine, tenant)}

    where = tenancy.schema_name(tenant)
    assert found == {
        f"role {APPLICATION_ROLE} holds, beyond its need, TRUNCATE on {where}.documents",
        f"role {APPLICATION_ROLE} lacks DELETE on {where}.tags",
        f"role {APPLICATION_ROLE} holds, beyond its need, CREATE on {where}",
    }
    report = check_drift(engine)
    assert not report.clean
    assert {str(p) for p in report.privileges if p.schema == where} == found
    roles.setup(engine, APPLICATION_ROLE)
    assert _problems(engine, tenant) == []


def test_migrating_keeps_the_grants_exact(engine: Engine, app_engine: Engine, tenant: str) -> None:
    head = migrations.head_revision()
    migrations.downgrade(engine, "-1", tenant=tenant)
    migrations.upgrade(engine, tenant=tenant)

    with engine.connect() as conn:
        assert migrations.read_versions(conn, [tenancy.schema_name(tenant)]) == {
            tenancy.schema_name(tenant): head
        }
    assert _problems(engine, tenant) == []


@pytest.fixture
def throwaway_role(engine: Engine) -> Iterator[str]:
    name = f"dms_refused_{uuid.uuid4().hex[:8]}"
    yield name
    _run(engine, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.mark.parametrize("attribute", ["SUPERUSER", "BYPASSRLS"])
def test_a_role_the_policies_do_not_hold_is_refused(
    engine: Engine, throwaway_role: str, attribute: str
) -> None:
    _run(
        engine,
        sql.SQL("CREATE ROLE {} {}").format(sql.Identifier(throwaway_role), sql.SQL(attribute)),
    )

    with pytest.raises(RoleRefused, match=f"role {throwaway_role} is a"):
        roles.setup(engine, throwaway_role)

    with engine.connect() as conn:
        assert throwaway_role not in roles.recorded_roles(conn)


def test_the_migrating_role_cannot_be_the_application(engine: Engine) -> None:
    with engine.connect() as conn:
        me = conn.execute(sa.select(sa.func.current_user())).scalar_one()

    # The suite migrates as a superuser, refused as such; an owner that is not one is refused
    # as the migrating role (dms.roles._create_or_adopt).
    with pytest.raises(RoleRefused, match=f"role {me} is"):
        roles.setup(engine, me)


@pytest.mark.parametrize("name", ["", "App", "a-b", "pg_app", "x" * 64, "é", 7, None])
def test_a_name_that_is_no_plain_role_name_is_refused_before_any_sql(
    engine: Engine, name: object
) -> None:
    with engine.connect() as conn:
        before = roles.recorded_roles(conn)

    with pytest.raises(ValidationError, match="a role name is"):
        roles.setup(engine, name)  # type: ignore[arg-type]

    with engine.connect() as conn:
        assert roles.recorded_roles(conn) == before


def test_acting_as_a_user_on_an_unprotected_connection_is_said_once(
    engine: Engine, app_engine: Engine, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    user = new_user(engine)
    roles._warned.clear()
    with caplog.at_level(logging.WARNING, logger="dms.roles"):
        for _ in range(2):
            with UnitOfWork(engine, tenant=tenant, user_id=user) as uow:
                uow.folders.children(None)
        with UnitOfWork(app_engine, tenant=tenant, user_id=user) as uow:
            uow.folders.children(None)

    said = [r.getMessage() for r in caplog.records if r.name == "dms.roles"]
    assert len(said) == 1
    assert "does not hold it to the row-level security" in said[0]
    assert f"role {engine.url.username}" in said[0]


def test_dms_roles_setup_and_check_say_what_they_did(
    engine: Engine, app_engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    schema = sql.Identifier(tenancy.schema_name(tenant))
    role = sql.Identifier(APPLICATION_ROLE)

    assert main(["--database-url", url, "roles", "setup", "--app", APPLICATION_ROLE]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"role {APPLICATION_ROLE}: the application's; granted the shared")

    _run(engine, sql.SQL("REVOKE SELECT ON {}.tags FROM {}").format(schema, role))
    assert main(["--database-url", url, "check"]) == 1
    out = capsys.readouterr().out
    assert (
        f"privileges: role {APPLICATION_ROLE} lacks SELECT on {tenancy.schema_name(tenant)}.tags:"
        " run dms roles setup"
    ) in out


@pytest.fixture
def ungranted_role(engine: Engine) -> Iterator[str]:
    """A login role that nobody granted anything of dms's."""
    name = f"dms_ungranted_{uuid.uuid4().hex[:8]}"
    _run(engine, sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    _run(engine, sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    _run(engine, sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.mark.parametrize("command", [["status"], ["users", "list"]])
def test_a_missing_grant_is_one_line_naming_it_never_a_traceback(
    engine: Engine, ungranted_role: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = engine.url.set(username=ungranted_role).render_as_string(hide_password=False)

    assert main(["--database-url", url, *command]) == 1

    err = capsys.readouterr().err
    assert err == (
        f"error: the role {ungranted_role} may not use the schema {SHARED_SCHEMA}: run dms roles"
        f" setup --app {ungranted_role} as the owner (docs/operations.md)\n"
    )


def test_dms_healthcheck_warns_of_a_connection_the_policies_do_not_hold(
    engine: Engine, app_engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    owner = engine.url.render_as_string(hide_password=False)
    application = app_engine.url.render_as_string(hide_password=False)

    main(["--database-url", owner, "healthcheck"])
    as_owner = capsys.readouterr().err
    main(["--database-url", application, "healthcheck"])
    as_application = capsys.readouterr().err

    assert f"warning: dms connects as role {engine.url.username}, a superuser" in as_owner
    assert "warning" not in as_application
