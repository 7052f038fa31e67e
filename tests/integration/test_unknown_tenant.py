"""A unit of work of a tenant that does not exist raises TenantNotFound on first use, for free.

The unit of work never asks the registry up front (that would cost every unit of work a round
trip, and the job worker opens one per job); the first statement routed to the missing schema
fails with SQLSTATE 42P01, and only then is the registry asked.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ProgrammingError

from dms import provisioning, tenancy
from dms.domain import DocumentQuery
from dms.errors import TenantNotFound
from dms.repositories.imports import NewImportedDocument
from dms.schema import tenant as t
from dms.services import create_document, define_field, search_documents, tag_documents
from dms.uow import UnitOfWork
from tests.conftest import new_slug

Use = Callable[[UnitOfWork], object]

#: A first use of each repository, and of use cases that start with different statements.
FIRST_USES: dict[str, Use] = {
    "documents.get": lambda uow: uow.documents.get(uuid.uuid4()),
    "documents.add": lambda uow: uow.documents.add(title="A.pdf"),
    "documents.hold_off_writes": lambda uow: uow.documents.hold_off_writes(),
    "folders.add": lambda uow: uow.folders.add(name="F"),
    "folders.children": lambda uow: uow.folders.children(None),
    "tags.all": lambda uow: uow.tags.all(),
    "tags.link": lambda uow: uow.tags.link([uuid.uuid4()], [uuid.uuid4()]),
    "revisions.history": lambda uow: uow.revisions.history(uuid.uuid4()),
    # Its first command is a SET CONSTRAINTS naming the tenant's schema, not a Core statement.
    "imports.import_documents": lambda uow: uow.imports.import_documents(
        [
            NewImportedDocument(
                title="a.txt",
                folder_id=None,
                source_name=b"a.txt",
                source_path=b"/a.txt",
                storage_key="k/a",
                sha256="0" * 64,
                size_bytes=1,
                mime_type="text/plain",
            )
        ]
    ),
    "metadata.list_fields": lambda uow: uow.metadata.list_fields(),
    "create_document": lambda uow: create_document(uow, title="A.pdf"),
    "define_field (required)": lambda uow: define_field(
        uow, name="F", field_type="string", required=True, default="x"
    ),
    "search_documents": lambda uow: search_documents(uow, DocumentQuery()),
    "tag_documents": lambda uow: tag_documents(uow, [uuid.uuid4()], [uuid.uuid4()]),
}


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every statement sent to the server through ``engine`` during the test."""
    sent: list[str] = []

    def record(**event_arguments: Any) -> None:
        sent.append(event_arguments["statement"])

    event.listen(engine, "before_cursor_execute", record, named=True)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


@pytest.mark.parametrize("use", list(FIRST_USES.values()), ids=list(FIRST_USES))
def test_first_use_of_an_unregistered_tenant_raises_tenant_not_found(
    engine: Engine, user_id: uuid.UUID, use: Use
) -> None:
    ghost = new_slug()

    with (
        UnitOfWork(engine, tenant=ghost, user_id=user_id) as uow,
        pytest.raises(TenantNotFound, match=ghost),
    ):
        use(uow)

    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.to_regnamespace(f"tenant_{ghost}"))) is None
        with pytest.raises(TenantNotFound):
            tenancy.get_tenant(conn, ghost)


def test_a_dropped_tenant_raises_tenant_not_found(engine: Engine, user_id: uuid.UUID) -> None:
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    provisioning.drop_tenant(engine, slug)

    with UnitOfWork(engine, tenant=slug, user_id=user_id) as uow, pytest.raises(TenantNotFound):
        uow.folders.add(name="Too late")


def _reads(statements: list[str]) -> list[str]:
    """``statements`` without the transaction's settings (on Citus a unit of work sets some)."""
    return [s for s in statements if not s.startswith("SET LOCAL") and "set_config(" not in s]


def test_a_unit_of_work_asks_the_registry_nothing(
    engine: Engine, tenant: str, statements: list[str]
) -> None:
    """Opening one reads nothing; a read costs exactly its own statement."""
    with UnitOfWork(engine, tenant=tenant) as uow:
        opened = list(statements)
        uow.tags.all()

    assert _reads(opened) == []
    assert len(_reads(statements)) == 1
    assert "tenants" not in _reads(statements)[0]


def test_the_registry_is_asked_once_when_the_tenant_is_missing(
    engine: Engine, statements: list[str]
) -> None:
    """Control for the test above: the same counter sees the registry when it is asked."""
    with UnitOfWork(engine, tenant=new_slug()) as uow, pytest.raises(TenantNotFound):
        uow.tags.all()

    assert len(_reads(statements)) == 2
    assert "dms.tenants" in _reads(statements)[1]


def test_a_registered_tenant_missing_a_table_keeps_the_driver_error(
    engine: Engine, tenant: str
) -> None:
    """Not migrated (a table is missing), not unknown: that is an operator's problem to see."""
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        routed.execute(sa.schema.DropTable(t.document_tags))
        routed.execute(sa.schema.DropTable(t.tags))

    with UnitOfWork(engine, tenant=tenant) as uow, pytest.raises(ProgrammingError) as raised:
        uow.tags.all()

    assert type(raised.value.orig) is psycopg.errors.UndefinedTable
