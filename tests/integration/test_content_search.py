"""Content search: the index follows every change in its transaction; ranking, filters, pages.

Text is stored here as the extraction job stores it (``uow.search.store_text``); the job itself
is tested in ``tests/jobs/test_extraction_jobs.py``.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import date

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.domain import Cursor, Document, DocumentQuery, MetadataFilter, NewDocument, Page
from dms.errors import PermissionDenied, ValidationError
from dms.repositories import documents as documents_repository
from dms.schema import tenant as t
from dms.schema.tenant import TEXT_PART_MAX_CHARS
from dms.services import (
    add_revision,
    create_document,
    define_field,
    search_documents,
    set_value,
    tag_documents,
    untag_documents,
)
from dms.uow import UnitOfWork
from tests.conftest import tenant_unless_named

Search = Callable[..., Page[Document]]


@pytest.fixture
def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """A test that does not name ``tenant`` commits nothing: it shares the module's."""
    yield from tenant_unless_named(request, engine)


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


def found(uow: UnitOfWork, text: str, **filters: object) -> list[str]:
    page = search_documents(uow, DocumentQuery(text=text, **filters), limit=100)  # type: ignore[arg-type]
    return [doc.title for doc in page.items]


def with_text(uow: UnitOfWork, title: str, *parts: str, **values: object) -> Document:
    """A document whose current revision has ``parts`` as its extracted text."""
    document = create_document(uow, title=title, **values)  # type: ignore[arg-type]
    upload(uow, document, *parts)
    return uow.documents.get(document.id)


def upload(uow: UnitOfWork, document: Document, *parts: str) -> None:
    content = "".join(parts).encode()
    revision = add_revision(
        uow,
        document.id,
        storage_key=f"test/{uuid.uuid4()}",
        sha256=hashlib.sha256(content).hexdigest(),
        size_bytes=len(content),
        mime_type="text/plain",
    )
    uow.search.store_text(revision.id, extractor="text", parts=parts)


def test_content_title_tags_and_text_values_are_found(uow: UnitOfWork) -> None:
    with uow:
        note = define_field(uow, name="Note", field_type="text")
        urgent = uow.tags.add(name="Dringend")
        with_text(uow, "Offer from ACME", "The quotation covers forty anvils.")
        document = create_document(uow, title="Letter", tag_ids=[urgent.id])
        set_value(uow, document.id, note.id, "Call the harbourmaster")

        assert found(uow, "anvils") == ["Offer from ACME"]
        assert found(uow, "acme") == ["Offer from ACME"]
        assert found(uow, "dringend") == ["Letter"]
        assert found(uow, "harbourmaster") == ["Letter"]
        assert found(uow, "nowhere") == []


def test_accents_and_case_are_folded_both_ways(uow: UnitOfWork) -> None:
    with uow:
        with_text(uow, "Café Müller", "Crème brûlée à la carte")

        for text in ("cafe", "CAFÉ", "muller", "creme brulee", "Crème"):
            assert found(uow, text) == ["Café Müller"], text


def test_the_syntax_phrases_or_exclusion_prefix(uow: UnitOfWork) -> None:
    with uow:
        with_text(uow, "one", "late payment fee for the invoice")
        with_text(uow, "two", "payment was late, fee waived")
        with_text(uow, "three", "a receipt for the payment")

        assert found(uow, '"late payment"') == ["one"]
        assert sorted(found(uow, "late fee")) == ["one", "two"]
        assert sorted(found(uow, "invoice or receipt")) == ["one", "three"]
        assert sorted(found(uow, "payment -waived")) == ["one", "three"]
        assert sorted(found(uow, "recei*")) == ["three"]
        assert sorted(found(uow, 'pay* -"late payment"')) == ["three", "two"]


@pytest.mark.parametrize(
    "text", ['"unbalanced quote', "the", "*** !!! &&", "a:* & !b | (c", "' OR 1=1 --", "\\'"]
)
def test_odd_queries_give_results_not_errors(uow: UnitOfWork, text: str) -> None:
    with uow:
        with_text(uow, "doc", "the unbalanced quote")

        assert found(uow, text) in ([], ["doc"])


def test_the_index_follows_every_change_in_its_transaction(uow: UnitOfWork) -> None:
    with uow:
        note = define_field(uow, name="Note", field_type="string")
        tag = uow.tags.add(name="alpha")
        document = with_text(uow, "Original title", "first revision words")

        uow.documents.rename(document.id, title="Renamed heading", version=document.version)
        assert found(uow, "original") == []
        assert found(uow, "renamed") == ["Renamed heading"]
        # The content survives a change of the title (only the header was rewritten).
        assert found(uow, '"first revision words"') == ["Renamed heading"]

        tag_documents(uow, [document.id], [tag.id])
        assert found(uow, "alpha") == ["Renamed heading"]
        uow.tags.rename(tag.id, name="omega")
        assert found(uow, "alpha") == []
        assert found(uow, "omega") == ["Renamed heading"]
        untag_documents(uow, [document.id], [tag.id])
        assert found(uow, "omega") == []

        set_value(uow, document.id, note.id, "marginalia")
        assert found(uow, "marginalia") == ["Renamed heading"]

        upload(uow, uow.documents.get(document.id), "second revision vocabulary")
        assert found(uow, "first") == []
        assert found(uow, "vocabulary") == ["Renamed heading"]
        assert found(uow, "marginalia") == ["Renamed heading"]


def test_a_new_revision_is_searched_by_its_title_until_its_text_is_extracted(
    uow: UnitOfWork,
) -> None:
    with uow:
        document = with_text(uow, "Report", "old words")
        add_revision(
            uow,
            document.id,
            storage_key="k/2",
            sha256="0" * 64,
            size_bytes=0,
            mime_type="text/plain",
        )

        assert found(uow, "old") == []
        assert found(uow, "report") == ["Report"]


def test_raw_sql_through_the_application_role_is_indexed(
    engine: Engine, tenant: str, user_id: uuid.UUID, uow: UnitOfWork
) -> None:
    with uow:
        document = with_text(uow, "Before", "some words")
        uow.commit()
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        routed.execute(
            sa.update(t.documents).where(t.documents.c.id == document.id).values(title="After")
        )

    with UnitOfWork(engine, tenant=tenant) as reader:
        assert found(reader, "after") == ["After"]
        assert found(reader, "before") == []


def test_a_rolled_back_change_leaves_the_index_as_it_was(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        with_text(uow, "Kept", "committed words")
        uow.commit()
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        document = with_text(uow, "Dropped", "rolled back words")
        uow.documents.rename(document.id, title="Dropped too", version=document.version)
        # no commit

    with UnitOfWork(engine, tenant=tenant) as reader:
        assert found(reader, "words") == ["Kept"]
        assert found(reader, "dropped") == []


def test_deleted_documents_are_not_found(uow: UnitOfWork) -> None:
    with uow:
        document = with_text(uow, "Trash", "discarded words")
        uow.documents.soft_delete(document.id, version=document.version)

        assert found(uow, "discarded") == []


def test_every_part_of_a_long_text_is_searchable(uow: UnitOfWork) -> None:
    # Distinct words: PostgreSQL keeps 256 positions per word and part, docs/search.md says.
    filler = " ".join(f"w{n}" for n in range(TEXT_PART_MAX_CHARS // 7))
    parts = [f"{filler} needle{n}" for n in range(4)]
    assert all(len(part) <= TEXT_PART_MAX_CHARS for part in parts)
    with uow:
        with_text(uow, "Long", *parts)

        for n in range(4):
            assert found(uow, f"needle{n}") == ["Long"]
        # A phrase near the end of a part keeps its positions (below 16,384).
        last = f"w{TEXT_PART_MAX_CHARS // 7 - 1}"
        assert found(uow, f'"{last} needle3"') == ["Long"]


def test_a_title_ranks_above_tags_and_tags_above_content(uow: UnitOfWork) -> None:
    with uow:
        tag = uow.tags.add(name="zebra")
        with_text(uow, "In the content", "a zebra crossing")
        create_document(uow, title="Zebra in the title")
        create_document(uow, title="In a tag", tag_ids=[tag.id])

        assert found(uow, "zebra") == ["Zebra in the title", "In a tag", "In the content"]


def test_words_close_together_rank_higher(uow: UnitOfWork) -> None:
    with uow:
        with_text(uow, "apart", "quarterly " + "other words " * 40 + "figures")
        with_text(uow, "reversed", "figures quarterly")
        with_text(uow, "together", "the quarterly figures are in")

        assert found(uow, "quarterly figures") == ["together", "reversed", "apart"]


def test_text_combines_with_every_other_filter(uow: UnitOfWork) -> None:
    with uow:
        amount = define_field(uow, name="Amount", field_type="int")
        due = define_field(uow, name="Due", field_type="date")
        paid = uow.tags.add(name="paid")
        archive = uow.folders.add(name="Archive")
        year = uow.folders.add(name="2026", parent_id=archive.id)
        matching = {
            "folder_id": year.id,
            "tag_ids": [paid.id],
            "metadata": {amount.id: 120, due.id: date(2026, 3, 1)},
        }
        with_text(uow, "Invoice A", "invoice text", **matching)
        with_text(uow, "Invoice B", "invoice text", **{**matching, "folder_id": None})
        with_text(uow, "Invoice C", "invoice text", **{**matching, "tag_ids": []})
        with_text(uow, "Invoice D", "invoice text", **{**matching, "metadata": {amount.id: 5}})
        with_text(uow, "Other E", "invoice text", **matching)

        assert found(
            uow,
            "invoice",
            folder_id=archive.id,
            tags_all=frozenset({paid.id}),
            metadata=(MetadataFilter(field_id=amount.id, at_least=100),),
            title_contains="invoice",
        ) == ["Invoice A"]


def filters_of(uow: UnitOfWork, document: Document) -> set[uuid.UUID]:
    """What the index holds as ``document``'s folders and tags (the same on every part)."""
    rows = uow.connection.execute(
        sa.select(t.document_search.c.filters).where(t.document_search.c.document_id == document.id)
    ).scalars()
    distinct = {frozenset(row) for row in rows}
    assert len(distinct) == 1, distinct
    return set(distinct.pop())


def test_folder_and_tag_filters_follow_every_move_and_link(uow: UnitOfWork) -> None:
    with uow:
        paid = uow.tags.add(name="paid")
        sent = uow.tags.add(name="sent")
        archive = uow.folders.add(name="Archive")
        year = uow.folders.add(name="2026", parent_id=archive.id)
        inbox = uow.folders.add(name="Inbox")
        document = with_text(uow, "Invoice", "first part ", "second part", folder_id=year.id)
        assert filters_of(uow, document) == {year.id, archive.id}

        tag_documents(uow, [document.id], [paid.id, sent.id])
        untag_documents(uow, [document.id], [sent.id])
        assert filters_of(uow, document) == {year.id, archive.id, paid.id}
        assert found(uow, "invoice", tags_any=frozenset({paid.id, sent.id})) == ["Invoice"]
        assert found(uow, "invoice", tags_all=frozenset({paid.id, sent.id})) == []

        document = uow.documents.get(document.id)
        uow.documents.move(document.id, folder_id=inbox.id, version=document.version)
        assert filters_of(uow, document) == {inbox.id, paid.id}
        assert found(uow, "invoice", folder_id=inbox.id) == ["Invoice"]
        assert found(uow, "invoice", folder_id=archive.id) == []

        # A folder moved with its documents: they are under its new ancestors, not its old.
        uow.folders.move(inbox.id, parent_id=year.id)
        assert filters_of(uow, document) == {inbox.id, year.id, archive.id, paid.id}
        assert found(uow, "invoice", folder_id=archive.id, tags_all=frozenset({paid.id})) == [
            "Invoice"
        ]
        uow.folders.move(year.id, parent_id=None)
        assert filters_of(uow, document) == {inbox.id, year.id, paid.id}
        assert found(uow, "invoice", folder_id=archive.id) == []
        assert found(uow, "part", folder_id=year.id) == ["Invoice"]


def test_raw_sql_moves_and_links_keep_the_filters(
    engine: Engine, tenant: str, user_id: uuid.UUID, uow: UnitOfWork
) -> None:
    with uow:
        paid = uow.tags.add(name="paid")
        archive = uow.folders.add(name="Archive")
        inner = uow.folders.add(name="Inner")
        document = with_text(uow, "Invoice", "some words", folder_id=inner.id)
        uow.commit()
    folders, documents = t.folders, t.documents
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        # Each change after the link, which rewrites the document's rows anyway.
        routed.execute(sa.insert(t.document_tags).values(document_id=document.id, tag_id=paid.id))
        routed.execute(
            sa.update(folders).where(folders.c.id == inner.id).values(parent_id=archive.id)
        )

    with UnitOfWork(engine, tenant=tenant) as reader:
        assert filters_of(reader, document) == {inner.id, archive.id, paid.id}
        assert found(reader, "words", folder_id=archive.id, tags_all=frozenset({paid.id})) == [
            "Invoice"
        ]
    with engine.begin() as conn:
        routed = tenancy.route(conn, tenant)
        routed.execute(sa.delete(t.tags).where(t.tags.c.id == paid.id))
        routed.execute(
            sa.update(documents).where(documents.c.id == document.id).values(folder_id=None)
        )

    with UnitOfWork(engine, tenant=tenant) as reader:
        assert filters_of(reader, document) == set()
        assert found(reader, "words", folder_id=archive.id) == []


def test_pages_never_skip_or_repeat_a_document(uow: UnitOfWork) -> None:
    with uow:
        for n in range(23):
            # Equal ranks in groups: the id breaks the ties.
            with_text(uow, f"doc {n:02}", "common " * (n % 3 + 1))
        query = DocumentQuery(text="common")

        seen: list[uuid.UUID] = []
        after: Cursor | None = None
        while True:
            page = search_documents(uow, query, limit=5, after=after)
            seen += [doc.id for doc in page.items]
            if page.next_cursor is None:
                break
            after = Cursor.decode(page.next_cursor.encode())  # as an API client would
        everything = search_documents(uow, query, limit=100)

        assert len(seen) == len(set(seen)) == 23
        assert seen == [doc.id for doc in everything.items]


def test_snippets_highlight_the_words_for_the_page_only(uow: UnitOfWork) -> None:
    with uow:
        first = with_text(uow, "first", "Somewhere in here the treasure is buried. " * 3)
        with_text(uow, "second", "no treasure here, only sand")
        untitled = create_document(uow, title="treasure map")

        page = search_documents(uow, DocumentQuery(text="treasure"), limit=2)

        assert [doc.title for doc in page.items] == ["treasure map", "first"]
        assert set(page.snippets) == {first.id}  # the map has no text; "second" is not on it
        snippet = page.snippets[first.id]
        assert snippet.highlights
        assert all(snippet.text[a:b].lower() == "treasure" for a, b in snippet.highlights)
        assert "[treasure]" in snippet.marked()
        assert untitled.id not in page.snippets


def test_the_total_is_exact_up_to_the_ranked_matches(
    uow: UnitOfWork, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents_repository, "RANK_CANDIDATES", 5)
    with uow:
        with_text(uow, "one", "rare words", "second part with rare words")
        page = search_documents(uow, DocumentQuery(text="rare"))
        assert (page.estimated_total, page.total_exact) == (1, True)  # two parts, one document

        uow.documents.add_many([NewDocument(title=f"many {n}", folder_id=None) for n in range(5)])
        page = search_documents(uow, DocumentQuery(text="many"), limit=3)

        assert (page.estimated_total, page.total_exact) == (5, False)
        assert len(page.items) == 3


def test_a_search_without_text_has_no_total(uow: UnitOfWork) -> None:
    with uow:
        with_text(uow, "one", "words")
        page = search_documents(uow, DocumentQuery())

        assert (page.estimated_total, dict(page.snippets)) == (None, {})


def test_cursors_of_the_two_orders_do_not_mix(uow: UnitOfWork) -> None:
    with uow:
        for n in range(3):
            with_text(uow, f"doc {n}", "words")
        by_title = search_documents(uow, DocumentQuery(), limit=1).next_cursor
        by_rank = search_documents(uow, DocumentQuery(text="words"), limit=1).next_cursor
        assert by_title is not None
        assert by_rank is not None

        with pytest.raises(ValidationError, match="content search"):
            search_documents(uow, DocumentQuery(), after=by_rank)
        with pytest.raises(ValidationError, match="without text"):
            search_documents(uow, DocumentQuery(text="words"), after=by_title)
        with pytest.raises(ValidationError, match="finite float"):
            search_documents(
                uow,
                DocumentQuery(text="words"),
                after=Cursor(title_key="", id=uuid.uuid4(), rank=float("nan")),
            )


def test_a_configuration_change_reindexes_with_stemming(
    engine: Engine, tenant: str, uow: UnitOfWork
) -> None:
    with uow:
        with_text(uow, "Runner", "she runs every morning")
        assert uow.search.config() == "simple"
        assert found(uow, "running") == []
        uow.search.set_config("english")
        stale = uow.search.stale_documents(after=None, limit=10)
        uow.commit()
    # Search rows are the database's: a user rebuilds none (docs/security.md), an operator does.
    user = UnitOfWork(engine, tenant=tenant, user_id=uow.user_id)
    with user as refused, pytest.raises(PermissionDenied):
        refused.search.rebuild(stale)
    with UnitOfWork(engine, tenant=tenant, system="operator") as operator:
        operator.search.rebuild(stale)
        operator.commit()

    with UnitOfWork(engine, tenant=tenant, user_id=uow.user_id) as reader:
        assert len(stale) == 1
        assert reader.search.stale_documents(after=None, limit=10) == []
        assert found(reader, "running") == ["Runner"]
        assert found(reader, "the") == []  # a stop word now: nothing, and no error


@pytest.mark.parametrize("name", ["klingon", "English", "pg_catalog.english", "", "a;b"])
def test_an_unknown_configuration_is_refused_and_nothing_changes(
    uow: UnitOfWork, name: str
) -> None:
    with uow:
        with pytest.raises(ValidationError, match="text search configuration"):
            uow.search.set_config(name)
        assert uow.search.config() == "simple"


@pytest.mark.parametrize(
    ("parts", "why"),
    [
        (["nul\x00byte"], "NUL"),
        (["lone \udc80 surrogate"], "surrogate"),
        (["x" * (TEXT_PART_MAX_CHARS + 1)], "the limit is"),
        ([b"bytes"], "must be a string"),
    ],
)
def test_text_that_cannot_be_stored_is_refused_before_any_sql(
    uow: UnitOfWork, parts: Sequence[object], why: str
) -> None:
    with uow:
        document = with_text(uow, "Doc", "kept words")
        assert document.current_revision_id is not None

        with pytest.raises(ValidationError, match=why):
            uow.search.store_text(
                document.current_revision_id,
                extractor="text",
                parts=parts,  # type: ignore[arg-type]
            )

        assert uow.search.text_of(document.current_revision_id) == ["kept words"]


def test_a_word_in_more_documents_than_are_ranked_pages_the_ranked_ones_once(
    uow: UnitOfWork, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents_repository, "RANK_CANDIDATES", 10)
    with uow:
        crowd = uow.folders.add(name="Crowd")
        few = uow.folders.add(name="Few")
        uow.documents.add_many(
            [NewDocument(title=f"common {n}", folder_id=crowd.id) for n in range(30)]
        )
        uow.documents.add_many(
            [NewDocument(title=f"common {n}", folder_id=few.id) for n in range(2)]
        )
        query = DocumentQuery(text="common")

        seen: list[uuid.UUID] = []
        after: Cursor | None = None
        while True:
            page = search_documents(uow, query, limit=4, after=after)
            seen += [doc.id for doc in page.items]
            if page.next_cursor is None:
                break
            after = page.next_cursor
        in_few = search_documents(uow, DocumentQuery(text="common", folder_id=few.id))

        assert len(seen) == len(set(seen)) == 10
        assert (page.estimated_total, page.total_exact) == (10, False)
        # Conditions hold before the bound: the two documents of the small folder are found.
        assert len(in_few.items) == 2
