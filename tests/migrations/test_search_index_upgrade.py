"""Revisions 0009 and 0010 index the documents a tenant already has; their downgrades undo it."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms import DocumentQuery, UnitOfWork, migrations, provisioning
from dms.services import create_document, search_documents
from dms.users import create_user, create_users_stand_in


def _tenant_at_head(url: URL) -> tuple[Engine, uuid.UUID]:
    """An engine on ``url`` migrated to head with tenant ``acme``, and a user."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenant(engine, "acme")
    with engine.begin() as conn:
        return engine, create_user(conn, email="a@example.org", display_name="A")


def test_documents_from_before_0009_are_found_after_the_upgrade(empty_database_url: URL) -> None:
    engine, user = _tenant_at_head(empty_database_url)
    with UnitOfWork(engine, tenant="acme", user_id=user) as uow:
        for n in range(3):
            create_document(uow, title=f"Quarterly report {n}")
        uow.commit()

    migrations.downgrade(engine, "0008")
    with engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names(schema="tenant_acme"))
    migrations.upgrade(engine)

    assert "document_search" not in tables
    with UnitOfWork(engine, tenant="acme") as uow:
        page = search_documents(uow, DocumentQuery(text="quarterly"))
    assert sorted(d.title for d in page.items) == [f"Quarterly report {n}" for n in range(3)]
    engine.dispose()


def test_documents_from_before_0010_are_found_inside_their_folder_and_tag(
    empty_database_url: URL,
) -> None:
    engine, user = _tenant_at_head(empty_database_url)
    with UnitOfWork(engine, tenant="acme", user_id=user) as uow:
        archive = uow.folders.add(name="Archive")
        year = uow.folders.add(name="2026", parent_id=archive.id)
        paid = uow.tags.add(name="paid")
        create_document(uow, title="Quarterly report", folder_id=year.id, tag_ids=[paid.id])
        create_document(uow, title="Quarterly plan")
        uow.commit()

    migrations.downgrade(engine, "0009")
    with engine.connect() as conn:
        columns = {
            c["name"] for c in sa.inspect(conn).get_columns("document_search", "tenant_acme")
        }
    migrations.upgrade(engine)

    assert "filters" not in columns
    query = DocumentQuery(text="quarterly", folder_id=archive.id, tags_all=frozenset({paid.id}))
    with UnitOfWork(engine, tenant="acme") as uow:
        page = search_documents(uow, query)
    assert [d.title for d in page.items] == ["Quarterly report"]
    engine.dispose()
