"""The other doors of a table (the review's list of what it did not try, docs/security.md):
TRUNCATE, COPY in and out, and INSERT ... ON CONFLICT aimed at a row the user may not view."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from dms.uow import UnitOfWork
from tests.adversarial.conftest import World, read_as_system, refused_as


def _hidden_document(app_engine: Engine, world: World) -> uuid.UUID:
    """A document in a folder that inherits nothing and grants eve nothing."""
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.admin) as uow:
        private = uow.folders.add(name="private")
        uow.access.set_inherits(private.id, False)
        document = uow.documents.add(title="salaries", folder_id=private.id)
        uow.commit()
    return document.id


@pytest.mark.parametrize(
    "table", ["documents", "audit_events", "access_entries", "document_search"]
)
def test_truncate_is_refused(app_engine: Engine, world: World, table: str) -> None:
    assert refused_as(app_engine, world, world.eve, f"TRUNCATE {{s}}.{table}") == "42501"


def test_copy_into_a_table_under_row_level_security_is_refused(
    app_engine: Engine, world: World
) -> None:
    copy = f'COPY "{world.schema}".documents (title, created_by) FROM STDIN'
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        driver = uow.connection.connection.driver_connection
        assert driver is not None
        with pytest.raises(Exception, match="row-level security"):
            _copy_in(driver, copy, ("smuggled", str(world.eve)))


def _copy_in(driver: Any, copy: str, row: tuple[str, ...]) -> None:
    with driver.cursor() as cursor, cursor.copy(copy) as writer:
        writer.write_row(row)


def test_copy_out_shows_what_a_select_shows(app_engine: Engine, world: World) -> None:
    hidden = _hidden_document(app_engine, world)
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        driver = uow.connection.connection.driver_connection
        assert driver is not None
        with driver.cursor() as cursor:
            query = f'COPY (SELECT id FROM "{world.schema}".documents) TO STDOUT'
            with cursor.copy(query) as reader:
                copied = {row[0] for row in reader.rows()}

    assert str(world.eve_doc) in copied
    assert str(hidden) not in copied


def test_an_upsert_aimed_at_a_hidden_row_changes_nothing(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    hidden = _hidden_document(app_engine, world)
    upsert = (
        "INSERT INTO {s}.documents (id, title, folder_id, created_by)"
        f" VALUES ('{hidden}', 'pwned', '{world.eves}', '{world.eve}')"
        " ON CONFLICT (id) DO UPDATE SET title = 'pwned'"
    )

    assert refused_as(app_engine, world, world.eve, upsert) == "42501"
    assert read_as_system(
        engine, world, f"SELECT title FROM {{s}}.documents WHERE id = '{hidden}'"
    ) == [("salaries",)]
