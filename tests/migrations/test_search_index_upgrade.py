"""Revision 0009 indexes the documents a tenant already has, and its downgrade takes it all away."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import URL

from dms import DocumentQuery, UnitOfWork, migrations, provisioning
from dms.services import create_document, search_documents
from dms.users import create_user, create_users_stand_in


def test_documents_from_before_0009_are_found_after_the_upgrade(empty_database_url: URL) -> None:
    engine = sa.create_engine(empty_database_url, poolclass=sa.NullPool)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenant(engine, "acme")
    with engine.begin() as conn:
        user = create_user(conn, email="a@example.org", display_name="A")
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
