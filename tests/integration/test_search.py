"""Search: folder subtree, tags, metadata equality and ranges, title, keyset pagination."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from datetime import date
from decimal import Decimal

import pytest
from sqlalchemy.engine import Engine

from dms.domain import Cursor, Document, DocumentQuery, MetadataFilter, Page
from dms.errors import NotFound, ValidationError
from dms.services import create_document, define_field, search_documents
from dms.uow import UnitOfWork
from tests.conftest import tenant_unless_named


@pytest.fixture
def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """A test that does not name ``tenant`` commits nothing: it shares the module's."""
    yield from tenant_unless_named(request, engine)


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


def titles(page: Page[Document]) -> list[str]:
    return [doc.title for doc in page.items]


def test_folder_subtree(uow: UnitOfWork) -> None:
    with uow:
        root = uow.folders.add(name="Root")
        child = uow.folders.add(name="Child", parent_id=root.id)
        other = uow.folders.add(name="Other")
        for title, folder in (("a", root), ("b", child), ("c", other)):
            uow.documents.add(title=title, folder_id=folder.id)
        search = functools.partial(search_documents, uow)
        assert titles(search(DocumentQuery(folder_id=root.id))) == ["a", "b"]
        direct = DocumentQuery(folder_id=root.id, include_subfolders=False)
        assert titles(search(direct)) == ["a"]
        assert titles(search(DocumentQuery())) == ["a", "b", "c"]


def test_tags_all_and_any(uow: UnitOfWork) -> None:
    with uow:
        red, blue = uow.tags.add(name="red"), uow.tags.add(name="blue")
        create_document(uow, title="both", tag_ids=[red.id, blue.id])
        create_document(uow, title="red", tag_ids=[red.id])
        create_document(uow, title="none")
        search = functools.partial(search_documents, uow)
        assert titles(search(DocumentQuery(tags_all=frozenset({red.id, blue.id})))) == ["both"]
        assert titles(search(DocumentQuery(tags_any=frozenset({red.id, blue.id})))) == [
            "both",
            "red",
        ]


def test_metadata_equality_and_ranges(uow: UnitOfWork) -> None:
    with uow:
        amount = define_field(uow, name="Amount", field_type="int")
        price = define_field(uow, name="Price", field_type="decimal")
        due = define_field(uow, name="Due", field_type="date")
        kind = define_field(uow, name="Kind", field_type="select", options=["x", "y"])
        topics = define_field(uow, name="Topics", field_type="multi_select", options=["t"])
        for n in range(5):
            create_document(
                uow,
                title=f"doc{n}",
                metadata={
                    amount.id: n * 10,
                    price.id: Decimal(n) / 4,
                    due.id: date(2026, 1, n + 1),
                    kind.id: "x" if n % 2 else "y",
                    **({topics.id: ["t"]} if n == 4 else {}),
                },
            )

        def find(*filters: MetadataFilter) -> list[str]:
            return titles(search_documents(uow, DocumentQuery(metadata=filters)))

        assert find(MetadataFilter(field_id=amount.id, equals=20)) == ["doc2"]
        assert find(MetadataFilter(field_id=amount.id, at_least=15, at_most=30)) == ["doc2", "doc3"]
        assert find(MetadataFilter(field_id=price.id, at_least=Decimal("0.75"))) == ["doc3", "doc4"]
        assert find(MetadataFilter(field_id=due.id, at_most=date(2026, 1, 2))) == ["doc0", "doc1"]
        assert find(MetadataFilter(field_id=kind.id, equals="x")) == ["doc1", "doc3"]
        assert find(MetadataFilter(field_id=topics.id, equals="t")) == ["doc4"]
        combined = (
            MetadataFilter(field_id=kind.id, equals="x"),
            MetadataFilter(field_id=amount.id, at_least=20),
        )
        assert find(*combined) == ["doc3"]


def test_bad_filters(uow: UnitOfWork) -> None:
    with uow:
        name = define_field(uow, name="Name", field_type="string")
        amount = define_field(uow, name="Amount", field_type="int")
        with pytest.raises(ValidationError, match="'Name'"):
            search_documents(
                uow, DocumentQuery(metadata=(MetadataFilter(field_id=name.id, at_least=1),))
            )
        with pytest.raises(ValidationError, match="'Amount'"):
            search_documents(
                uow, DocumentQuery(metadata=(MetadataFilter(field_id=amount.id, equals="ten"),))
            )
        with pytest.raises(NotFound):
            search_documents(
                uow, DocumentQuery(metadata=(MetadataFilter(field_id=uuid.uuid4(), equals=1),))
            )
        with pytest.raises(ValidationError):
            MetadataFilter(field_id=amount.id)
        with pytest.raises(ValidationError):
            search_documents(uow, DocumentQuery(), limit=0)


def test_title_substring_escapes_wildcards(uow: UnitOfWork) -> None:
    with uow:
        for title in ("100% done", "1000 done", "Under_score", "Underscore", "back\\slash"):
            uow.documents.add(title=title)
        search = functools.partial(search_documents, uow)
        assert titles(search(DocumentQuery(title_contains="0%"))) == ["100% done"]
        assert titles(search(DocumentQuery(title_contains="R_S"))) == ["Under_score"]
        assert titles(search(DocumentQuery(title_contains="k\\s"))) == ["back\\slash"]
        found = titles(search(DocumentQuery(title_contains="DONE")))
        assert sorted(found) == ["100% done", "1000 done"]


def test_combined_filters(uow: UnitOfWork) -> None:
    with uow:
        folder = uow.folders.add(name="F")
        tag = uow.tags.add(name="t")
        create_document(uow, title="Invoice 1", folder_id=folder.id, tag_ids=[tag.id])
        create_document(uow, title="Invoice 2", folder_id=folder.id)
        create_document(uow, title="Invoice 3", tag_ids=[tag.id])
        create_document(uow, title="Letter", folder_id=folder.id, tag_ids=[tag.id])
        query = DocumentQuery(
            folder_id=folder.id, tags_all=frozenset({tag.id}), title_contains="invoice"
        )
        assert titles(search_documents(uow, query)) == ["Invoice 1"]


def test_keyset_pagination_is_complete_and_stable(uow: UnitOfWork) -> None:
    with uow:
        folders = [uow.folders.add(name=f"F{n}") for n in range(2)]
        # Equal titles in different folders: the id breaks the tie.
        for n in range(23):
            uow.documents.add(title=f"Doc {n // 2:02}", folder_id=folders[n % 2].id)
        seen: list[uuid.UUID] = []
        cursor: Cursor | None = None
        while True:
            page = search_documents(uow, DocumentQuery(), limit=5, after=cursor)
            seen.extend(doc.id for doc in page.items)
            if page.next_cursor is None:
                break
            cursor = Cursor.decode(page.next_cursor.encode())
        assert len(seen) == len(set(seen)) == 23
        everything = search_documents(uow, DocumentQuery(), limit=100)
        assert [doc.id for doc in everything.items] == seen
        assert everything.next_cursor is None


def test_cursor_tokens() -> None:
    cursor = Cursor(title_key="doc 01", id=uuid.uuid4())
    assert Cursor.decode(cursor.encode()) == cursor
    with pytest.raises(ValidationError):
        Cursor.decode("not a cursor")
