"""Revisions: gap-free numbering (also under a race), current revision, duplicates."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from dms.domain import NewRevision, Revision
from dms.errors import NotFound, ValidationError
from dms.services import add_revision
from dms.uow import UnitOfWork
from tests.conftest import tenant_unless_named


def digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def upload(uow: UnitOfWork, document_id: uuid.UUID, content: str) -> Revision:
    return add_revision(
        uow,
        document_id,
        storage_key=f"blobs/{uuid.uuid4()}",
        sha256=digest(content),
        size_bytes=len(content),
        mime_type="text/plain",
    )


@pytest.fixture
def tenant(request: pytest.FixtureRequest, engine: Engine) -> Iterator[str]:
    """A test that does not name ``tenant`` commits nothing: it shares the module's."""
    yield from tenant_unless_named(request, engine)


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


def test_revisions_are_numbered_and_become_current(uow: UnitOfWork, user_id: uuid.UUID) -> None:
    with uow:
        doc = uow.documents.add(title="Notes.txt")
        assert uow.revisions.current(doc.id) is None
        first = upload(uow, doc.id, "one")
        second = upload(uow, doc.id, "two")
        assert [r.revision_no for r in uow.revisions.history(doc.id)] == [1, 2]
        assert uow.revisions.current(doc.id) == second
        assert uow.revisions.get(first.id) == first
        updated = uow.documents.get(doc.id)
    assert updated.current_revision_id == second.id
    assert updated.version == doc.version + 2
    assert second.uploaded_by == user_id


def test_find_by_sha256_across_documents(uow: UnitOfWork) -> None:
    with uow:
        a = uow.documents.add(title="A.txt")
        b = uow.documents.add(title="B.txt")
        ra = upload(uow, a.id, "same")
        rb = upload(uow, b.id, "same")
        upload(uow, b.id, "other")
        found = uow.revisions.find_by_sha256(digest("same"))
        assert {r.id for r in found} == {ra.id, rb.id}
        uow.documents.soft_delete(a.id, version=uow.documents.get(a.id).version)
        assert [r.id for r in uow.revisions.find_by_sha256(digest("same"))] == [rb.id]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sha256", "ABC"),
        ("sha256", digest("x").upper()),
        ("size_bytes", -1),
        ("size_bytes", "10"),
        ("mime_type", "pdf"),
        ("storage_key", " "),
        ("storage_key", ".."),
        ("storage_key", "blobs/../../etc/passwd"),
        ("storage_key", "blobs/.."),
    ],
)
def test_bad_revision_input(uow: UnitOfWork, field: str, value: object) -> None:
    good: dict[str, object] = {
        "storage_key": "k",
        "sha256": digest("x"),
        "size_bytes": 1,
        "mime_type": "text/plain",
    }
    with uow:
        doc = uow.documents.add(title="A.txt")
        with pytest.raises(ValidationError, match=field.split("_", maxsplit=1)[0]):
            uow.revisions.add(doc.id, **{**good, field: value})  # type: ignore[arg-type]
        assert uow.revisions.history(doc.id) == []


def test_an_unknown_uploader_is_not_found_by_their_id(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    """A user id the IAM's users table lacks is the user's problem, not the document's."""
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        doc = uow.documents.add(title="A.txt")
        uow.commit()
    stranger = uuid.uuid4()
    new = NewRevision(
        document_id=doc.id, storage_key="k", sha256=digest("x"), size_bytes=1, mime_type="a/b"
    )

    unknown = f"^user {stranger} does not exist"
    with (
        UnitOfWork(engine, tenant=tenant, user_id=stranger) as uow,
        pytest.raises(NotFound, match=unknown) as one,
    ):
        upload(uow, doc.id, "one")
    with (
        UnitOfWork(engine, tenant=tenant, user_id=stranger) as uow,
        pytest.raises(NotFound, match=unknown),
    ):
        uow.revisions.add_many([new])

    assert str(doc.id) not in str(one.value)
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.revisions.history(doc.id) == []


def test_revisions_may_share_a_storage_key(uow: UnitOfWork) -> None:
    with uow:
        doc = uow.documents.add(title="A.txt")
        kwargs = {"storage_key": "k", "sha256": digest("x"), "size_bytes": 1, "mime_type": "a/b"}
        add_revision(uow, doc.id, **kwargs)  # type: ignore[arg-type]
        add_revision(uow, doc.id, **kwargs)  # type: ignore[arg-type]
        assert [r.storage_key for r in uow.revisions.history(doc.id)] == ["k", "k"]


def test_mime_types_are_stored_normalised(uow: UnitOfWork) -> None:
    with uow:
        doc = uow.documents.add(title="table.sgml")
        revision = add_revision(
            uow, doc.id, storage_key="k", sha256=digest("x"), size_bytes=1, mime_type="text/SGML"
        )
        assert revision.mime_type == "text/sgml"


def test_revision_of_unknown_or_deleted_document(uow: UnitOfWork) -> None:
    with uow:
        with pytest.raises(NotFound):
            upload(uow, uuid.uuid4(), "x")
        doc = uow.documents.add(title="A.txt")
        uow.documents.soft_delete(doc.id, version=doc.version)
        with pytest.raises(NotFound):
            upload(uow, doc.id, "x")


def test_racing_uploads_get_one_and_two(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        doc = uow.documents.add(title="Contested.txt")
        uow.commit()
    barrier = threading.Barrier(2)
    numbers: list[int] = []
    errors: list[BaseException] = []

    def race(content: str) -> None:
        try:
            with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
                barrier.wait(timeout=10)
                numbers.append(upload(uow, doc.id, content).revision_no)
                uow.commit()
        except BaseException as exc:  # the main thread reports it
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(c,)) for c in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(numbers) == [1, 2]
    with UnitOfWork(engine, tenant=tenant) as uow:
        history = uow.revisions.history(doc.id)
        assert [r.revision_no for r in history] == [1, 2]
        assert uow.documents.get(doc.id).current_revision_id == history[-1].id
