"""Who may do what elsewhere is nobody else's business (finding 9 of the review, in part,
docs/security.md): the grants derived from the entries are visible only to the principals they
name, while every rule that reads them still sees the actor's own."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from dms.domain.access import ALL_RIGHTS
from dms.uow import UnitOfWork
from tests.adversarial.conftest import World, read_as_system

NIL = "00000000-0000-0000-0000-000000000000"


def _grants_seen_by(app_engine: Engine, world: World, user: object) -> set[str]:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=user) as uow:  # type: ignore[arg-type]
        rows = uow.connection.exec_driver_sql(
            f'SELECT DISTINCT principal_id::text FROM "{world.schema}".access_grants'
        )
        return {str(row[0]) for row in rows}


def test_a_user_sees_only_the_grants_that_name_her(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    every = {
        str(row[0])
        for row in read_as_system(
            engine, world, "SELECT DISTINCT principal_id FROM {s}.access_grants"
        )
    }

    seen = _grants_seen_by(app_engine, world, world.eve)

    assert str(world.admin) in every
    assert seen == {str(world.eve), NIL}


def test_the_rules_still_read_the_actors_own_grants(app_engine: Engine, world: World) -> None:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        assert uow.access.rights(folder_id=world.eves) == ALL_RIGHTS
        assert uow.folders.get(world.office).name == "office"


def test_a_user_sees_only_the_scopes_of_what_she_may_view(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.admin) as uow:
        vault = uow.folders.add(name="vault")
        uow.access.set_inherits(vault.id, False)  # a scope of its own, closed to eve
        uow.commit()
    every = {
        str(row[0]) for row in read_as_system(engine, world, "SELECT id FROM {s}.access_scopes")
    }

    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        rows = uow.connection.exec_driver_sql(f'SELECT id FROM "{world.schema}".access_scopes')
        seen = {str(row[0]) for row in rows}

    assert every == {NIL, str(world.office), str(world.eves), str(vault.id)}
    assert seen == {NIL, str(world.office), str(world.eves)}
