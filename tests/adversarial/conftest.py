"""What an attacker holding the application role's credentials tries (docs/security.md).

Every test here acts through the application's own role (:func:`app_engine`: made by ``dms
roles setup`` as a deployment makes it) and, where it says so, as a user named by the
transaction-local ``dms.actor``, sending raw SQL of its own on the unit of work's connection:
what an application may run on a user's behalf, which the policies and triggers must hold to
the same rules as the library.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from dms import tenancy
from dms.domain.access import ALL_RIGHTS, Rights
from dms.driver_errors import sqlstate_of
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork
from tests.conftest import new_user


@pytest.fixture
def app_engine(engine: Engine, tenant: str) -> Iterator[Engine]:
    """The application's role, set up as a deployment does."""
    application = application_engine(engine)
    yield application
    application.dispose()


@dataclass(frozen=True)
class World:
    """A tenant where everyone may view and edit at the root but only ``admin`` manages it;
    ``eve`` (the attacker) holds every right on her folder ``eves`` and owns ``eve_doc`` there;
    ``doc`` is admin's, in folder ``office``, tagged ``tag``."""

    tenant: str
    schema: str
    admin: uuid.UUID
    eve: uuid.UUID
    eves: uuid.UUID
    eve_doc: uuid.UUID
    office: uuid.UUID
    doc: uuid.UUID
    tag: uuid.UUID


@pytest.fixture
def world(engine: Engine, app_engine: Engine, tenant: str) -> World:
    admin, eve = new_user(engine, "admin"), new_user(engine, "eve")
    with UnitOfWork(app_engine, tenant=tenant, user_id=admin) as uow:
        office = uow.folders.add(name="office")
        eves = uow.folders.add(name="eves")
        doc = uow.documents.add(title="minutes", folder_id=office.id)
        tag = uow.tags.add(name="board")
        uow.tags.link([doc.id], [tag.id])
        uow.access.grant(ALL_RIGHTS, user_id=admin)
        uow.access.grant(ALL_RIGHTS, folder_id=eves.id, user_id=eve)
        uow.access.grant(Rights.VIEW, folder_id=office.id)  # everyone: view only there
        uow.access.set_inherits(office.id, False)
        uow.access.grant(Rights.VIEW | Rights.EDIT)  # everyone, at the root
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=eve) as uow:
        eve_doc = uow.documents.add(title="mine", folder_id=eves.id)
        uow.commit()
    schema = tenancy.schema_name(tenant)
    return World(tenant, schema, admin, eve, eves.id, eve_doc.id, office.id, doc.id, tag.id)


#: Who acts: a user, or a system principal by its name (the role's holder may name either).
Actor = uuid.UUID | str


def raw_as(app_engine: Engine, world: World, actor: Actor, statement: str) -> int:
    """Run ``statement`` (``{s}``: the tenant's schema, quoted) as ``actor`` through the
    application role, committed if accepted; its row count."""
    named = {"system": actor} if isinstance(actor, str) else {"user_id": actor}
    with UnitOfWork(app_engine, tenant=world.tenant, **named) as uow:
        result = uow.connection.exec_driver_sql(statement.format(s=f'"{world.schema}"'))
        uow.commit()
        return result.rowcount


def refused_as(app_engine: Engine, world: World, actor: Actor, statement: str) -> str:
    """The SQLSTATE with which ``statement`` is refused as ``actor`` (nothing committed)."""
    with pytest.raises(DBAPIError) as refused:
        raw_as(app_engine, world, actor, statement)
    sqlstate = sqlstate_of(refused.value)
    assert sqlstate
    return sqlstate


def read_as_system(engine: Engine, world: World, query: str) -> list[tuple[object, ...]]:
    """Rows of ``query`` (``{s}`` as above), read as a system principal (sees every row)."""
    with UnitOfWork(engine, tenant=world.tenant, system="audit") as uow:
        rows = uow.connection.exec_driver_sql(query.format(s=f'"{world.schema}"'))
        return [tuple(row) for row in rows]


__all__ = ["Actor", "World", "raw_as", "read_as_system", "refused_as"]
