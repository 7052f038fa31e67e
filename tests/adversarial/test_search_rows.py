"""The search rows are the database's (finding 8 of the review, docs/security.md): a user who
may view a document cannot rewrite its words, add rows of her own or delete its rows to hide it
from everyone's search; what she may change (a title she may edit) still reindexes."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from dms.domain import DocumentQuery
from dms.uow import UnitOfWork
from tests.adversarial.conftest import World, raw_as, read_as_system, refused_as


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {s}.document_search SET terms = to_tsvector('simple', 'poison')"
        " WHERE document_id = '{doc}'",
        "DELETE FROM {s}.document_search WHERE document_id = '{doc}'",
        "INSERT INTO {s}.document_search (document_id, part_no, config, terms)"
        " VALUES ('{doc}', 99, 'simple', to_tsvector('simple', 'poison'))",
    ],
)
def test_a_viewer_cannot_write_a_documents_search_rows(
    engine: Engine, app_engine: Engine, world: World, statement: str
) -> None:
    rows = (
        f"SELECT part_no, terms::text FROM {{s}}.document_search WHERE document_id = '{world.doc}'"
    )
    before = read_as_system(engine, world, rows)

    sqlstate = refused_as(app_engine, world, world.eve, statement.replace("{doc}", str(world.doc)))

    assert sqlstate == "42501"
    assert read_as_system(engine, world, rows) == before != []


def test_what_a_user_may_change_still_reindexes(app_engine: Engine, world: World) -> None:
    raw_as(
        app_engine,
        world,
        world.eve,
        f"UPDATE {{s}}.documents SET title = 'quarterly figures' WHERE id = '{world.eve_doc}'",
    )

    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve) as uow:
        page = uow.documents.search(DocumentQuery(text="quarterly"), limit=10)
    assert [document.id for document in page.items] == [world.eve_doc]
