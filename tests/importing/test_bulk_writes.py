"""The bulk writes of an import: few statements per batch, conflicts skipped, bad input refused."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from dms.domain import NewDocument, NewFolder, NewRevision
from dms.errors import NotFound, ValidationError
from dms.repositories.imports import ImportRepository, NewImportedDocument
from dms.uow import UnitOfWork
from tests.conftest import tenant_unless_named


@pytest.fixture
def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """A test that does not name ``tenant`` commits nothing: it shares the module's."""
    yield from tenant_unless_named(request, engine)


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


def _revision(document_id: uuid.UUID, mime_type: str = "text/plain") -> NewRevision:
    return NewRevision(
        document_id=document_id,
        storage_key=f"k/{uuid.uuid4()}",
        sha256=hashlib.sha256(b"x").hexdigest(),
        size_bytes=1,
        mime_type=mime_type,
    )


def test_names_taken_ignoring_case_come_back_as_none(uow: UnitOfWork) -> None:
    with uow:
        folder = uow.folders.add(name="Docs")
        uow.documents.add(title="Index.html", folder_id=folder.id)
        folders = uow.folders.add_many(
            [NewFolder(name="docs", parent_id=None), NewFolder(name="Other", parent_id=None)]
        )
        documents = uow.documents.add_many(
            [
                NewDocument(title="index.html", folder_id=folder.id),
                NewDocument(title="a.txt", folder_id=folder.id),
                NewDocument(title="A.TXT", folder_id=folder.id),
            ]
        )
        assert folders[0] is None
        assert folders[1] is not None
        assert documents[0] is None
        assert documents[1] is not None
        assert documents[2] is None  # an earlier one of the same call took the title
        assert sorted(uow.documents.titles_in(folder.id)) == ["Index.html", "a.txt"]


def test_revisions_are_numbered_and_made_current(uow: UnitOfWork) -> None:
    with uow:
        ids = uow.documents.add_many(
            [NewDocument(title=f"{n}.txt", folder_id=None) for n in range(3)]
        )
        documents = [i for i in ids if i is not None]
        revisions = uow.revisions.add_many([_revision(d, "Text/SGML") for d in documents])
        uow.documents.set_current_revisions(dict(zip(documents, revisions, strict=True)))
        for document_id, revision_id in zip(documents, revisions, strict=True):
            current = uow.revisions.current(document_id)
            assert current is not None
            assert (current.id, current.revision_no, current.mime_type) == (
                revision_id,
                1,
                "text/sgml",
            )


def test_a_deleted_document_refuses_the_whole_batch(uow: UnitOfWork) -> None:
    with uow:
        live = uow.documents.add(title="live.txt")
        gone = uow.documents.add(title="gone.txt")
        uow.documents.soft_delete(gone.id, version=gone.version)
        with pytest.raises(NotFound, match=str(gone.id)):
            uow.revisions.add_many([_revision(live.id), _revision(gone.id)])
        assert uow.revisions.history(live.id) == []


@pytest.mark.parametrize(
    "bad",
    [
        lambda d: [_revision(d), _revision(d)],  # two for one document
        lambda d: [_revision(d, "pdf")],
        lambda d: [
            NewRevision(
                document_id=d, storage_key=" ", sha256="0" * 64, size_bytes=1, mime_type="a/b"
            )
        ],
    ],
)
def test_bad_revisions_are_refused_before_any_sql(uow: UnitOfWork, bad: object) -> None:
    with uow:
        document = uow.documents.add(title="doc.txt")
        with pytest.raises(ValidationError):
            uow.revisions.add_many(bad(document.id))  # type: ignore[operator]
        assert uow.revisions.history(document.id) == []


def test_unknown_folder_refuses_the_whole_batch(uow: UnitOfWork) -> None:
    with uow:
        with pytest.raises(NotFound):
            uow.documents.add_many(
                [
                    NewDocument(title="a", folder_id=None),
                    NewDocument(title="b", folder_id=uuid.uuid4()),
                ]
            )
        assert uow.documents.titles_in(None) == []
        with pytest.raises(ValidationError):
            uow.folders.add_many([NewFolder(name="a/b", parent_id=None)])


def _imported(title: str, folder_id: uuid.UUID | None, data: bytes) -> NewImportedDocument:
    sha256 = hashlib.sha256(data).hexdigest()
    return NewImportedDocument(
        title=title,
        folder_id=folder_id,
        source_name=title.encode(),
        source_path=b"/share/" + title.encode(),
        storage_key=f"k/{sha256}",
        sha256=sha256,
        size_bytes=len(data),
        mime_type="Text/Plain",
    )


def _imports(uow: UnitOfWork) -> ImportRepository:
    return ImportRepository(uow.connection, tenant=uow.tenant, user_id=uow.user_id)


def test_imported_documents_point_at_their_first_revision_with_provenance(
    uow: UnitOfWork,
) -> None:
    with uow:
        folder = uow.folders.add(name="Share")
        uow.documents.add(title="Taken.txt", folder_id=folder.id)
        results = _imports(uow).import_documents(
            [
                _imported("a.txt", folder.id, b"first"),
                _imported("taken.txt", folder.id, b"refused: the title is taken"),
                _imported("A.TXT", folder.id, b"refused: an earlier entry took it"),
                _imported("top.txt", None, b"at the top level"),
            ]
        )
        assert results[1] is None
        assert results[2] is None
        created = [r for r in results if r is not None]
        assert len(created) == 2
        for imported, data in zip(created, [b"first", b"at the top level"], strict=True):
            document = uow.documents.get(imported.document_id)
            current = uow.revisions.current(imported.document_id)
            assert current is not None
            assert (document.current_revision_id, document.version) == (imported.revision_id, 2)
            assert (current.revision_no, current.sha256, current.mime_type) == (
                1,
                hashlib.sha256(data).hexdigest(),
                "text/plain",
            )
        found = _imports(uow).imported_into([folder.id, None])
        assert sorted((e.source_name, e.document_id) for e in found) == sorted(
            [(b"a.txt", created[0].document_id), (b"top.txt", created[1].document_id)]
        )
        assert sorted(uow.documents.titles_in(folder.id)) == ["Taken.txt", "a.txt"]


def test_the_key_to_a_current_revision_is_checked_at_once_again_after_an_import(
    uow: UnitOfWork,
) -> None:
    """The import defers the documents' key to their current revision for its own statements
    only: a later statement that points a document at another one's revision is refused by
    itself, not at commit, and the document keeps its revision."""
    with uow:
        first, second = _imports(uow).import_documents(
            [_imported("a.txt", None, b"a"), _imported("b.txt", None, b"b")]
        )
        assert first is not None
        assert second is not None
        with pytest.raises(NotFound, match="refers to a row that does not exist"):
            uow.documents.set_current_revision(first.document_id, second.revision_id)
        assert uow.documents.get(first.document_id).current_revision_id == first.revision_id


def test_an_import_into_a_deleted_folder_writes_nothing(uow: UnitOfWork) -> None:
    with uow:
        live = uow.folders.add(name="Live")
        gone = uow.folders.add(name="Gone")
        uow.folders.soft_delete_subtree(gone.id)
        with pytest.raises(NotFound, match=str(gone.id)):
            _imports(uow).import_documents(
                [_imported("a.txt", live.id, b"a"), _imported("b.txt", gone.id, b"b")]
            )
        assert uow.documents.titles_in(live.id) == []
        assert _imports(uow).imported_into([live.id]) == []


def test_folders_under_a_deleted_parent_are_refused_whole(uow: UnitOfWork) -> None:
    with uow:
        live = uow.folders.add(name="Live")
        gone = uow.folders.add(name="Gone")
        uow.folders.soft_delete_subtree(gone.id)
        with pytest.raises(NotFound, match=str(gone.id)):
            uow.folders.add_many(
                [NewFolder(name="a", parent_id=live.id), NewFolder(name="b", parent_id=gone.id)]
            )
        assert uow.folders.children(live.id) == []
        # Every name taken is not a missing parent: None each, and no error.
        uow.folders.add(name="x", parent_id=live.id)
        assert uow.folders.add_many([NewFolder(name="X", parent_id=live.id)]) == [None]


def test_bad_imported_documents_are_refused_before_any_sql(uow: UnitOfWork) -> None:
    with uow:
        with pytest.raises(ValidationError):
            _imports(uow).import_documents(
                [_imported("ok.txt", None, b"ok"), _imported(" ", None, b"blank title")]
            )
        assert uow.documents.titles_in(None) == []
