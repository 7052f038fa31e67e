"""Tags: names unique ignoring case, bulk tag/untag, documents having all or any tags."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from dms.errors import AlreadyExists, ConcurrentUpdate, NotFound, ValidationError
from dms.services import create_document, tag_documents, untag_documents
from dms.uow import UnitOfWork
from tests.conftest import tenant_unless_named


@pytest.fixture
def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """A test that does not name ``tenant`` commits nothing: it shares the module's."""
    yield from tenant_unless_named(request, engine)


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


def test_create_get_rename_delete(uow: UnitOfWork) -> None:
    with uow:
        tag = uow.tags.add(name="Urgent")
        assert uow.tags.get(tag.id) == tag
        assert uow.tags.get_by_name("URGENT") == tag
        renamed = uow.tags.rename(tag.id, name="Critical")
        assert renamed.name == "Critical"
        doc = uow.documents.add(title="A.pdf")
        tag_documents(uow, [doc.id], [tag.id])
        uow.tags.delete(tag.id)
        assert uow.tags.all() == []
        assert uow.tags.tags_of(doc.id) == []
        with pytest.raises(NotFound):
            uow.tags.delete(tag.id)
        with pytest.raises(NotFound):
            uow.tags.rename(tag.id, name="x")


def test_names_unique_ignoring_case(uow: UnitOfWork) -> None:
    with uow:
        uow.tags.add(name="Invoice")
        other = uow.tags.add(name="Receipt")
        with pytest.raises(AlreadyExists, match="'invoice'"):
            uow.tags.add(name="invoice")
        with pytest.raises(AlreadyExists):
            uow.tags.rename(other.id, name="INVOICE")
        assert [t.name for t in uow.tags.all()] == ["Invoice", "Receipt"]


@pytest.mark.parametrize("name", ["", " ", "x" * 101, None])
def test_bad_names(uow: UnitOfWork, name: object) -> None:
    with uow:
        with pytest.raises(ValidationError):
            uow.tags.add(name=name)  # type: ignore[arg-type]
        assert uow.tags.all() == []


def test_bulk_tag_untag_and_queries(uow: UnitOfWork) -> None:
    with uow:
        red, blue = uow.tags.add(name="red"), uow.tags.add(name="blue")
        a, b, c = (uow.documents.add(title=f"{n}.pdf") for n in "abc")
        assert tag_documents(uow, [a.id, b.id], [red.id, blue.id]) == 4
        assert tag_documents(uow, [a.id, c.id], [red.id]) == 1
        assert [d.id for d in uow.documents.with_all_tags([red.id, blue.id])] == [a.id, b.id]
        assert [d.id for d in uow.documents.with_any_tag([red.id, blue.id])] == [a.id, b.id, c.id]
        assert untag_documents(uow, [a.id, b.id], [blue.id]) == 2
        assert uow.documents.with_all_tags([red.id, blue.id]) == []
        assert [t.name for t in uow.tags.tags_of(a.id)] == ["red"]


def test_tag_unknown_document_or_tag_writes_nothing(uow: UnitOfWork) -> None:
    with uow:
        tag = uow.tags.add(name="red")
        doc = uow.documents.add(title="a.pdf")
        with pytest.raises(NotFound):
            tag_documents(uow, [doc.id, uuid.uuid4()], [tag.id])
        with pytest.raises(NotFound):
            tag_documents(uow, [doc.id], [uuid.uuid4()])
        assert uow.tags.tags_of(doc.id) == []


def test_deleted_documents_are_not_found_by_tag(uow: UnitOfWork) -> None:
    with uow:
        tag = uow.tags.add(name="red")
        doc = uow.documents.add(title="a.pdf")
        tag_documents(uow, [doc.id], [tag.id])
        uow.documents.soft_delete(doc.id, version=uow.documents.get(doc.id).version)
        assert uow.documents.with_any_tag([tag.id]) == []


def test_tag_and_untag_bump_the_version_of_changed_documents(uow: UnitOfWork) -> None:
    with uow:
        red = uow.tags.add(name="red")
        read = uow.documents.add(title="a.pdf")
        other = uow.documents.add(title="b.pdf")
        tag_documents(uow, [read.id], [red.id])
        tagged = uow.documents.get(read.id)
        with pytest.raises(ConcurrentUpdate, match=f"version {read.version + 1}, not"):
            uow.documents.rename(read.id, title="stale.pdf", version=read.version)
        assert tag_documents(uow, [read.id], [red.id]) == 0
        assert uow.documents.get(read.id).version == tagged.version
        assert untag_documents(uow, [read.id, other.id], [red.id]) == 1
        assert uow.documents.get(read.id).version == tagged.version + 1
        assert uow.documents.get(other.id).version == other.version
        assert uow.documents.get(read.id).title == "a.pdf"


def test_generators_of_ids_are_read_once(uow: UnitOfWork) -> None:
    with uow:
        red = uow.tags.add(name="red")
        doc = create_document(uow, title="a.pdf", tag_ids=(tag.id for tag in [red]))
        assert [tag.name for tag in uow.tags.tags_of(doc.id)] == ["red"]
        assert untag_documents(uow, (d for d in [doc.id]), (t for t in [red.id])) == 1
        assert tag_documents(uow, (d for d in [doc.id]), (t for t in [red.id])) == 1
        assert uow.documents.get(doc.id).version == doc.version + 2
