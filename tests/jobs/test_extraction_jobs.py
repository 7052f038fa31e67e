"""The text-extraction job: enqueued with each revision, run by a worker, and its failures."""

from __future__ import annotations

import gzip
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs
from dms.domain import Document, DocumentQuery, Revision
from dms.extraction import DEFAULT_EXTRACTORS
from dms.jobs import JobState, Worker
from dms.jobs.tables import processing_jobs
from dms.processing import handlers
from dms.services import EXTRACT_REVISION, add_revision, create_document, search_documents
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork
from tests.documents import pdf


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def upload(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    store: LocalBlobStore,
    content: bytes,
    *,
    mime_type: str = "text/plain",
    title: str = "Upload",
    document: Document | None = None,
) -> tuple[Document, Revision]:
    key = f"{tenant}/{uuid.uuid4()}"
    stored = store.put(key, content)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        if document is None:
            document = create_document(uow, title=f"{title} {uuid.uuid4().hex[:6]}")
        revision = add_revision(
            uow,
            document.id,
            storage_key=key,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            mime_type=mime_type,
        )
        uow.commit()
    return document, revision


def work_off(engine: Engine, tenant: str, store: LocalBlobStore, **options: object) -> None:
    """Run a worker until no extraction job of ``tenant`` is queued or running."""
    with Worker(
        engine,
        handlers(store, **options),  # type: ignore[arg-type]
        jobs.WorkerConfig(concurrency=2, poll_seconds=0.1),
        unit_of_work=UnitOfWork.factory(engine),
    ):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                stats = jobs.stats(conn, tenant=tenant, kind=EXTRACT_REVISION)
            if stats.total(JobState.QUEUED) + stats.total(JobState.RUNNING) == 0:
                return
            time.sleep(0.05)
    raise AssertionError("the extraction jobs did not finish in 60 s")


def job_of(engine: Engine, tenant: str, revision: Revision) -> tuple[str, str | None]:
    jobs_table = processing_jobs
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(jobs_table.c.state, jobs_table.c.last_error).where(
                jobs_table.c.tenant == tenant,
                jobs_table.c.kind == EXTRACT_REVISION,
                jobs_table.c.payload["revision_id"].astext == str(revision.id),
            )
        ).one()
    return str(row.state), row.last_error


def titles(engine: Engine, tenant: str, text: str) -> list[str]:
    with UnitOfWork(engine, tenant=tenant) as uow:
        page = search_documents(uow, DocumentQuery(text=text))
    return [doc.title for doc in page.items]


def test_an_upload_enqueues_its_extraction_in_its_transaction(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    _, kept = upload(engine, tenant, user_id, store, b"kept")
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        document = create_document(uow, title="rolled back")
        add_revision(
            uow, document.id, storage_key="k", sha256="0" * 64, size_bytes=0, mime_type="a/b"
        )
        # no commit: the revision and its job go together

    with engine.connect() as conn:
        stats = jobs.stats(conn, tenant=tenant, kind=EXTRACT_REVISION)
    assert stats.total(JobState.QUEUED) == 1
    assert job_of(engine, tenant, kept)[0] == "queued"


def test_a_worker_makes_text_pdf_html_and_gzip_searchable(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    files = {
        "plain": (b"the plain aardvark", "text/plain"),
        "pdf": (pdf(["a page about a", "second page: bandicoot"]), "application/pdf"),
        "html": (b"<html><body><p>capybara</p><script>dingo()</script></body></html>", "text/html"),
        "gzip": (gzip.compress("échidna in UTF-8".encode()), "application/gzip"),
    }
    for title, (content, mime_type) in files.items():
        upload(engine, tenant, user_id, store, content, mime_type=mime_type, title=title)

    work_off(engine, tenant, store)

    assert [t.split()[0] for t in titles(engine, tenant, "aardvark")] == ["plain"]
    assert [t.split()[0] for t in titles(engine, tenant, "bandicoot")] == ["pdf"]
    assert [t.split()[0] for t in titles(engine, tenant, "capybara")] == ["html"]
    assert titles(engine, tenant, "dingo") == []  # scripts are not text
    assert [t.split()[0] for t in titles(engine, tenant, "echidna")] == ["gzip"]


UNREADABLE = {
    "encrypted": (pdf(["secret"], password="s3cret"), "the PDF is encrypted"),  # noqa: S106
    "corrupt": (b"%PDF-1.4\ngarbage without end", "the PDF cannot be read"),
    "truncated": (gzip.compress(b"words " * 50, mtime=0)[:-12], "truncated gzip stream"),
}


@pytest.mark.parametrize("case", UNREADABLE)
def test_unreadable_content_fails_for_good_with_its_reason(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore, case: str
) -> None:
    content, reason = UNREADABLE[case]
    document, revision = upload(engine, tenant, user_id, store, content, mime_type="a/b")

    work_off(engine, tenant, store)

    state, error = job_of(engine, tenant, revision)
    assert state == "dead"
    assert error is not None
    assert reason in error
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.search.text_of(revision.id) is None
    assert titles(engine, tenant, document.title.split()[0]) == [document.title]


def test_bytes_that_do_not_match_the_revision_fail_for_good(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    _, tampered = upload(engine, tenant, user_id, store, b"original words")
    store.put(tampered.storage_key, b"tampered words")
    _, missing = upload(engine, tenant, user_id, store, b"soon gone")
    (store.root / missing.storage_key).unlink()

    work_off(engine, tenant, store)

    assert job_of(engine, tenant, tampered)[0] == "dead"
    assert "do not match its SHA-256" in str(job_of(engine, tenant, tampered)[1])
    assert "is missing" in str(job_of(engine, tenant, missing)[1])
    assert titles(engine, tenant, "tampered") == []


def test_a_superseded_revision_is_not_extracted(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    document, old = upload(engine, tenant, user_id, store, b"old wording")
    _, new = upload(engine, tenant, user_id, store, b"new wording", document=document)

    work_off(engine, tenant, store)

    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.search.text_of(old.id) is None
        assert uow.search.text_of(new.id) == ["new wording"]
    assert titles(engine, tenant, "wording") == [document.title]
    assert titles(engine, tenant, "old") == []


def test_an_extractor_of_ones_own_is_used_first(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    def fake_ocr(data: bytes, _mime_type: str) -> str | None:
        return "recognised platypus" if data.startswith(b"\x89PNG") else None

    upload(engine, tenant, user_id, store, b"\x89PNG image", mime_type="image/png", title="scan")

    work_off(engine, tenant, store, extractors=DEFAULT_EXTRACTORS.with_extractor("ocr", fake_ocr))

    assert [t.split()[0] for t in titles(engine, tenant, "platypus")] == ["scan"]
