"""The revision-verification job: its handler, its transactional enqueue, a worker running it."""

from __future__ import annotations

import gzip
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from dms import jobs
from dms.domain import Document, MetadataField, Revision
from dms.errors import NotFound, PermanentFailure
from dms.jobs import JobState, Worker, WorkerConfig
from dms.processing import (
    INTEGRITY_FIELD,
    PREVIEW_CHARS,
    PREVIEW_FIELD,
    VERIFY_REVISION,
    define_processing_fields,
    enqueue_verification,
    handlers,
    verify_revision,
)
from dms.services import add_revision, create_document
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def _upload(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    store: LocalBlobStore,
    content: bytes,
    *,
    mime_type: str = "text/plain",
    document: Document | None = None,
) -> tuple[Document, Revision]:
    key = f"{tenant}/{uuid.uuid4()}"
    stored = store.put(key, content)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        define_processing_fields(uow)
        if document is None:
            document = create_document(uow, title=f"Upload {uuid.uuid4().hex[:8]}")
        revision = add_revision(
            uow,
            document.id,
            storage_key=key,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            mime_type=mime_type,
        )
        enqueue_verification(uow, revision)
        uow.commit()
    return document, revision


def _run(engine: Engine, tenant: str, store: LocalBlobStore) -> None:
    """Claim and run every queued verification job of ``tenant`` the way the worker does."""
    handler = verify_revision(store)
    while True:
        with UnitOfWork(engine, tenant=tenant) as uow:
            claimed = jobs.dequeue(uow, "test", kinds=[VERIFY_REVISION], limit=10)
            if not claimed:
                return
            for job in claimed:
                if job.tenant != tenant:  # another test's: hand it back untouched
                    jobs.release(uow, job)
                    continue
                handler(uow, job)
                jobs.complete(uow, job)
            uow.commit()


def _values(engine: Engine, tenant: str, document: Document) -> dict[str, object]:
    with UnitOfWork(engine, tenant=tenant) as uow:
        fields = {f.id: f for f in uow.metadata.list_fields()}
        values = uow.metadata.values_of(document.id)
        return {
            fields[field_id].name: _label(fields[field_id], value)
            for field_id, value in values.items()
        }


def _label(field: MetadataField, value: object) -> object:
    """Show select values by their text, other values as they are."""
    options: dict[object, object] = {option.id: option.value for option in field.options}
    return options.get(value, value)


def test_intact_text_revision_is_verified_with_a_preview(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    content = ("Hello, world. " * 40).encode()
    document, _ = _upload(engine, tenant, user_id, store, content)
    _run(engine, tenant, store)
    values = _values(engine, tenant, document)
    assert values[INTEGRITY_FIELD] == "verified"
    assert values[PREVIEW_FIELD] == content.decode()[:PREVIEW_CHARS]


def test_binary_revision_is_verified_without_a_preview(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    document, _ = _upload(engine, tenant, user_id, store, b"%PDF-1.7", mime_type="application/pdf")
    _run(engine, tenant, store)
    values = _values(engine, tenant, document)
    assert values[INTEGRITY_FIELD] == "verified"
    assert PREVIEW_FIELD not in values


def test_tampered_blob_is_a_mismatch(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    document, revision = _upload(engine, tenant, user_id, store, b"original")
    store.put(revision.storage_key, b"tampered")
    _run(engine, tenant, store)
    assert _values(engine, tenant, document)[INTEGRITY_FIELD] == "mismatch"


def test_missing_blob_is_reported_missing(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    document, revision = _upload(engine, tenant, user_id, store, b"soon gone")
    (store.root / revision.storage_key).unlink()
    _run(engine, tenant, store)
    assert _values(engine, tenant, document)[INTEGRITY_FIELD] == "missing"


def test_superseded_revision_leaves_the_document_alone(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    document, first = _upload(engine, tenant, user_id, store, b"one")
    store.put(first.storage_key, b"tampered")  # would be a mismatch if it were current
    _upload(engine, tenant, user_id, store, b"two", document=document)
    _run(engine, tenant, store)
    assert _values(engine, tenant, document)[INTEGRITY_FIELD] == "verified"


def test_enqueue_is_idempotent_per_revision(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    _, revision = _upload(engine, tenant, user_id, store, b"x")
    with UnitOfWork(engine, tenant=tenant) as uow:
        again = enqueue_verification(uow, revision)
        uow.commit()
    assert again.created is False


def test_rolled_back_upload_takes_its_job_with_it(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    stored = store.put(f"{tenant}/rolled-back", b"x")
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        document = create_document(uow, title="Never committed")
        revision = add_revision(
            uow,
            document.id,
            storage_key=stored.storage_key,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            mime_type="text/plain",
        )
        enqueued = enqueue_verification(uow, revision)
        # no commit
    with engine.connect() as conn, pytest.raises(NotFound):
        jobs.get(conn, enqueued.job_id)


@pytest.mark.parametrize("payload", [{"revision": "?"}, {"revision_id": "not a uuid"}, [1]])
def test_payload_without_revision_fails_for_good(
    engine: Engine, tenant: str, store: LocalBlobStore, payload: object
) -> None:
    with UnitOfWork(engine, tenant=tenant) as uow:
        jobs.enqueue(uow, VERIFY_REVISION, payload, tenant=tenant)
        claimed = jobs.dequeue(uow, "test", kinds=[VERIFY_REVISION], limit=50)
        [job] = [j for j in claimed if j.tenant == tenant]
        with pytest.raises(PermanentFailure, match="revision_id"):
            verify_revision(store)(uow, job)


def test_tenant_without_processing_fields_fails_for_good_with_its_reason(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    stored = store.put(f"{tenant}/fieldless", b"x")
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        document = create_document(uow, title="No fields")
        revision = add_revision(
            uow,
            document.id,
            storage_key=stored.storage_key,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            mime_type="text/plain",
        )
        enqueue_verification(uow, revision)
        claimed = jobs.dequeue(uow, "test", kinds=[VERIFY_REVISION], limit=50)
        [job] = [j for j in claimed if j.tenant == tenant]
        with pytest.raises(PermanentFailure, match="Integrity"):
            verify_revision(store)(uow, job)


def test_job_of_a_purged_revision_has_nothing_to_do(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    document, _ = _upload(engine, tenant, user_id, store, b"soon purged")
    with UnitOfWork(engine, tenant=tenant) as uow:
        uow.documents.purge(document.id)
        uow.commit()
    _run(engine, tenant, store)  # raises if the handler does
    with engine.connect() as conn:
        stats = jobs.stats(conn, tenant=tenant, kind=VERIFY_REVISION)
    assert (stats.total(JobState.DONE), stats.total(JobState.QUEUED)) == (1, 0)


@pytest.mark.parametrize(
    "case",
    [
        # The failures of issue 15: gzip typed text/plain, UTF-16, NUL bytes.
        (gzip.compress(b"man page text\n" * 30), "text/plain", "man page text\nman page text"),
        ("UTF-16 text: héllo\n".encode("utf-16"), "text/plain", "UTF-16 text: héllo\n"),
        ("no BOM, little-endian".encode("utf-16-le"), "text/plain", "no BOM, little-endian"),
        (b"binary\x00\x01\x02\x03" * 50, "text/plain", None),
        ("café, Latin-1".encode("latin-1"), "text/x-c", "café, Latin-1"),
        (b"B\x08Bo\x08ol\x08ld\x08d and \x1b[1mcolour\x1b[0m", "text/plain", "Bold and colour"),
        (gzip.compress(b"inside a .gz")[:12], "application/gzip", "i"),  # cut short
        (b"\x1f\x8b\x08\x00" + b"\xff" * 40, "application/gzip", None),  # corrupt
        (b"%PDF-1.7 text-like", "application/pdf", None),
    ],
)
def test_previews_come_from_the_bytes_and_hold_no_nul(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    store: LocalBlobStore,
    case: tuple[bytes, str, str | None],
) -> None:
    content, mime_type, expected = case
    document, _ = _upload(engine, tenant, user_id, store, content, mime_type=mime_type)
    _run(engine, tenant, store)
    values = _values(engine, tenant, document)

    assert values[INTEGRITY_FIELD] == "verified"
    assert (PREVIEW_FIELD in values) == (expected is not None)
    shown = str(values.get(PREVIEW_FIELD, ""))
    assert shown.startswith(expected or "")
    assert "\x00" not in shown


def test_worker_processes_uploads_end_to_end(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    documents = [
        _upload(engine, tenant, user_id, store, f"document {n}".encode())[0] for n in range(5)
    ]
    with Worker(
        engine,
        handlers(store),
        WorkerConfig(concurrency=2, poll_seconds=0.2),
        unit_of_work=UnitOfWork.factory(engine),
    ):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                done = jobs.stats(conn, tenant=tenant, kind=VERIFY_REVISION).total(JobState.DONE)
            if done == len(documents):
                break
            time.sleep(0.05)
    assert done == len(documents)
    assert {_values(engine, tenant, d)[INTEGRITY_FIELD] for d in documents} == {"verified"}
