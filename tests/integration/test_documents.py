"""Documents: create, get, rename, move, soft delete, restore, purge, optimistic concurrency."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    InvariantViolation,
    NotFound,
    ValidationError,
)
from dms.schema import tenant as t
from dms.services import add_revision, create_document, define_field
from dms.uow import UnitOfWork
from tests.conftest import tenant_unless_named


def rows(engine: Engine, tenant: str, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(
            tenancy.route(conn, tenant).scalar(sa.select(sa.func.count()).select_from(table)) or 0
        )


@pytest.fixture
def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """A test that does not name ``tenant`` commits nothing: it shares the module's."""
    yield from tenant_unless_named(request, engine)


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


def test_create_and_get(uow: UnitOfWork, user_id: uuid.UUID) -> None:
    with uow:
        folder = uow.folders.add(name="Invoices")
        doc = uow.documents.add(title="March.pdf", folder_id=folder.id)
        assert uow.documents.get(doc.id) == doc
    assert doc.folder_id == folder.id
    assert doc.version == 1
    assert doc.created_by == user_id
    assert doc.current_revision_id is None
    assert not doc.is_deleted


@pytest.mark.parametrize("title", ["", "   ", "x" * 501, 42, None])
def test_create_refuses_bad_title(
    engine: Engine, tenant: str, uow: UnitOfWork, title: object
) -> None:
    with uow, pytest.raises(ValidationError):
        uow.documents.add(title=title)  # type: ignore[arg-type]
    assert rows(engine, tenant, t.documents) == 0


def test_create_in_unknown_folder(engine: Engine, tenant: str, uow: UnitOfWork) -> None:
    with uow, pytest.raises(NotFound, match="folder"):
        uow.documents.add(title="Lost.pdf", folder_id=uuid.uuid4())
    assert rows(engine, tenant, t.documents) == 0


def test_get_unknown(uow: UnitOfWork) -> None:
    with uow, pytest.raises(NotFound):
        uow.documents.get(uuid.uuid4())


def test_titles_unique_in_folder_ignoring_case(uow: UnitOfWork) -> None:
    with uow:
        uow.documents.add(title="Report.pdf")
        with pytest.raises(AlreadyExists, match=r"REPORT\.PDF"):
            uow.documents.add(title="REPORT.PDF")
        folder = uow.folders.add(name="Elsewhere")
        uow.documents.add(title="report.pdf", folder_id=folder.id)


def test_rename_bumps_version(uow: UnitOfWork) -> None:
    with uow:
        doc = uow.documents.add(title="Draft.pdf")
        renamed = uow.documents.rename(doc.id, title="Final.pdf", version=doc.version)
    assert renamed.title == "Final.pdf"
    assert renamed.version == doc.version + 1
    assert renamed.updated_at >= doc.updated_at


def test_stale_version_raises_and_changes_nothing(uow: UnitOfWork) -> None:
    with uow:
        doc = uow.documents.add(title="Draft.pdf")
        uow.documents.rename(doc.id, title="By Alice.pdf", version=doc.version)
        with pytest.raises(ConcurrentUpdate, match="version 2, not 1"):
            uow.documents.rename(doc.id, title="By Bob.pdf", version=doc.version)
        assert uow.documents.get(doc.id).title == "By Alice.pdf"


def test_stale_version_across_transactions(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        doc = uow.documents.add(title="Shared.pdf")
        uow.commit()
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as alice:
        alice.documents.rename(doc.id, title="Alice.pdf", version=doc.version)
        alice.commit()
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as bob:
        with pytest.raises(ConcurrentUpdate):
            bob.documents.move(doc.id, folder_id=None, version=doc.version)
        assert bob.documents.get(doc.id).title == "Alice.pdf"


def test_update_unknown_document(uow: UnitOfWork) -> None:
    with uow, pytest.raises(NotFound):
        uow.documents.rename(uuid.uuid4(), title="Nobody.pdf", version=1)


def test_rename_to_taken_title(uow: UnitOfWork) -> None:
    with uow:
        uow.documents.add(title="Taken.pdf")
        doc = uow.documents.add(title="Free.pdf")
        with pytest.raises(AlreadyExists, match=r"'taken\.PDF'"):
            uow.documents.rename(doc.id, title="taken.PDF", version=doc.version)
        assert uow.documents.get(doc.id).title == "Free.pdf"


def test_move(uow: UnitOfWork) -> None:
    with uow:
        folder = uow.folders.add(name="Archive")
        doc = uow.documents.add(title="Old.pdf")
        moved = uow.documents.move(doc.id, folder_id=folder.id, version=doc.version)
        assert moved.folder_id == folder.id
        with pytest.raises(NotFound, match="folder"):
            uow.documents.move(doc.id, folder_id=uuid.uuid4(), version=moved.version)
        assert uow.documents.get(doc.id).folder_id == folder.id


def test_soft_delete_and_restore(uow: UnitOfWork) -> None:
    with uow:
        doc = uow.documents.add(title="Trash.pdf")
        deleted = uow.documents.soft_delete(doc.id, version=doc.version)
        assert deleted.is_deleted
        with pytest.raises(NotFound):
            uow.documents.get(doc.id)
        assert uow.documents.get(doc.id, include_deleted=True) == deleted
        with pytest.raises(NotFound, match="deleted"):
            uow.documents.rename(doc.id, title="Nope.pdf", version=deleted.version)
        restored = uow.documents.restore(doc.id, version=deleted.version)
    assert not restored.is_deleted
    assert restored.version == doc.version + 2


def test_deleted_title_can_be_reused_but_restore_then_conflicts(uow: UnitOfWork) -> None:
    with uow:
        doc = uow.documents.add(title="Contract.pdf")
        deleted = uow.documents.soft_delete(doc.id, version=doc.version)
        uow.documents.add(title="contract.pdf")
        with pytest.raises(AlreadyExists, match=r"'Contract\.pdf'"):
            uow.documents.restore(doc.id, version=deleted.version)
        assert uow.documents.get(doc.id, include_deleted=True).is_deleted


def test_restore_of_live_document(uow: UnitOfWork) -> None:
    with uow:
        doc = uow.documents.add(title="Alive.pdf")
        with pytest.raises(InvariantViolation, match="not deleted"):
            uow.documents.restore(doc.id, version=doc.version)


def test_purge_removes_everything_of_the_document(
    engine: Engine, tenant: str, uow: UnitOfWork
) -> None:
    with uow:
        tag = uow.tags.add(name="doomed")
        field = define_field(uow, name="Kinds", field_type="multi_select", options=["a"])
        doc = create_document(uow, title="Doomed.pdf", tag_ids=[tag.id], metadata={field.id: ["a"]})
        add_revision(
            uow,
            doc.id,
            storage_key="blobs/doomed",
            sha256=hashlib.sha256(b"doomed").hexdigest(),
            size_bytes=6,
            mime_type="application/pdf",
        )
        uow.documents.purge(doc.id)
        with pytest.raises(NotFound):
            uow.documents.purge(doc.id)
        uow.commit()
    tables = (t.documents, t.file_revisions, t.document_tags, t.document_metadata)
    for table in (*tables, t.document_metadata_choices):
        assert rows(engine, tenant, table) == 0
    assert rows(engine, tenant, t.tags) == 1


def test_create_document_with_tags_and_metadata(uow: UnitOfWork) -> None:
    with uow:
        folder = uow.folders.add(name="Invoices")
        tag = uow.tags.add(name="paid")
        amount = define_field(uow, name="Amount", field_type="int")
        doc = create_document(
            uow, title="A.pdf", folder_id=folder.id, tag_ids=[tag.id], metadata={amount.id: 120}
        )
        assert [t.name for t in uow.tags.tags_of(doc.id)] == ["paid"]
        assert uow.metadata.values_of(doc.id) == {amount.id: 120}


def test_create_document_applies_defaults(uow: UnitOfWork) -> None:
    with uow:
        status = define_field(
            uow, name="Status", field_type="select", options=["new", "done"], default="new"
        )
        doc = create_document(uow, title="A.pdf")
        new = status.options[0]
        assert uow.metadata.values_of(doc.id) == {status.id: new.id}


def test_create_document_requires_required_fields(
    engine: Engine, tenant: str, uow: UnitOfWork
) -> None:
    with uow:
        field = define_field(uow, name="Customer", field_type="string", required=True)
        tag = uow.tags.add(name="x")
        with pytest.raises(ValidationError, match="'Customer'"):
            create_document(uow, title="A.pdf", tag_ids=[tag.id])
        create_document(uow, title="B.pdf", metadata={field.id: "ACME"})
        uow.commit()
    assert rows(engine, tenant, t.documents) == 1
    assert rows(engine, tenant, t.document_tags) == 0


def test_create_document_with_invalid_value_writes_nothing(
    engine: Engine, tenant: str, uow: UnitOfWork
) -> None:
    with uow:
        field = define_field(uow, name="Amount", field_type="int")
        with pytest.raises(ValidationError, match="'Amount'"):
            create_document(uow, title="A.pdf", metadata={field.id: "12"})
        uow.commit()
    assert rows(engine, tenant, t.documents) == 0
