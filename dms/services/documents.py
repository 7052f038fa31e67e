"""Use cases of documents: create one with its tags and values, upload a revision, search."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Iterable, Mapping

from dms import jobs
from dms.domain import Cursor, Document, DocumentQuery, Page, Revision
from dms.domain.search import check_query
from dms.domain.text_query import parse_text_query
from dms.domain.validation import check_ids, shown
from dms.errors import ValidationError
from dms.storage import BlobStore
from dms.uow import UnitOfWork

#: The job kind that extracts a revision's text for the content search (:mod:`dms.processing`).
EXTRACT_REVISION = "revision.extract"
#: Revisions per extraction job when many are enqueued together (an import's batch, a
#: backfill): the cost of a job (its claim, unit of work and completion) is shared by them.
EXTRACTION_BATCH = 100


def create_document(
    uow: UnitOfWork,
    *,
    title: str,
    folder_id: uuid.UUID | None = None,
    tag_ids: Iterable[uuid.UUID] = (),
    metadata: Mapping[uuid.UUID, object] | None = None,
) -> Document:
    """Create a document with its tags and metadata values, created by the unit's user.

    Fields with a default get it unless ``metadata`` has a value; every required field must
    end up with a value, else :class:`ValidationError` and nothing is written. The document
    starts at version 1 with its tags and values: nobody can have read it before.
    """
    tags = check_ids("tag", tag_ids)
    given = _checked_mapping(metadata)
    with uow.savepoint():
        # The insert first: it waits for a required field being defined concurrently
        # (define_field holds off document writes), so the fields read after it include that one.
        document = uow.documents.add(title=title, folder_id=folder_id)
        uow.tags.link([document.id], tags)
        defaults = {f.id: f.default for f in uow.metadata.list_fields() if f.default is not None}
        uow.metadata.put_values(document.id, {**defaults, **given})
        _require_complete(uow, document)
    return document


def _checked_mapping(metadata: object) -> Mapping[uuid.UUID, object]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"metadata must be a mapping of field ids, not {shown(metadata)}")
    check_ids("metadata field", metadata.keys())
    return metadata


def _require_complete(uow: UnitOfWork, document: Document) -> None:
    missing = uow.metadata.missing_required(document.id)
    if missing:
        names = ", ".join(repr(field.name) for field in missing)
        raise ValidationError(f"document {document.title!r} needs a value for {names}")


def add_revision(
    uow: UnitOfWork,
    document_id: uuid.UUID,
    *,
    storage_key: str,
    sha256: str,
    size_bytes: int,
    mime_type: str,
) -> Revision:
    """Append a revision to a document and make it the current one (bumps the version).

    Concurrent uploads to one document queue on its row lock and get consecutive numbers. The
    extraction of the revision's text (:data:`EXTRACT_REVISION`) is enqueued in the same
    transaction: the content search finds the revision's words once a worker has run it.
    """
    revision = uow.revisions.add(
        document_id,
        storage_key=storage_key,
        sha256=sha256,
        size_bytes=size_bytes,
        mime_type=mime_type,
    )
    uow.documents.set_current_revision(document_id, revision.id)
    jobs.enqueue_many(uow, [extraction_job(uow.tenant, revision.id)])
    return revision


def extraction_jobs(tenant: str, revision_ids: Iterable[uuid.UUID]) -> list[jobs.NewJob]:
    """The text extraction jobs of ``revision_ids``, for :func:`dms.jobs.enqueue_many`.

    One job per :data:`EXTRACTION_BATCH` revisions (``{"revision_ids": [...]}``), or
    :func:`extraction_job` for a single one. The idempotency key names the revisions: the same
    revisions enqueued again (an interrupted import or backfill run again) make no new job.
    """
    ids = [str(revision_id) for revision_id in revision_ids]
    batches = [
        ids[start : start + EXTRACTION_BATCH] for start in range(0, len(ids), EXTRACTION_BATCH)
    ]
    return [
        extraction_job(tenant, uuid.UUID(batch[0]))
        if len(batch) == 1
        else jobs.NewJob(
            kind=EXTRACT_REVISION,
            payload={"revision_ids": batch},
            tenant=tenant,
            idempotency_key=f"{EXTRACT_REVISION}:{_digest(batch)}",
        )
        for batch in batches
    ]


def extraction_job(tenant: str, revision_id: uuid.UUID) -> jobs.NewJob:
    """The text extraction job of one revision (``{"revision_id": ...}``), once per revision."""
    return jobs.NewJob(
        kind=EXTRACT_REVISION,
        payload={"revision_id": str(revision_id)},
        tenant=tenant,
        idempotency_key=f"{EXTRACT_REVISION}:{revision_id}",
    )


def _digest(ids: list[str]) -> str:
    # A key of bounded length that names the batch.
    return "batch-" + hashlib.sha256(",".join(ids).encode()).hexdigest()[:32]


def search_documents(
    uow: UnitOfWork, query: DocumentQuery, *, limit: int = 50, after: Cursor | None = None
) -> Page[Document]:
    """Return one page of the live documents matching ``query``, ordered by title then id.

    Reads the fields that the metadata filters name (:class:`~dms.errors.NotFound` for an
    unknown one), then searches. Pass the page's ``next_cursor`` as ``after`` for the next
    page; the cost of a page does not grow with its position (keyset, not OFFSET).

    A content search (``query.text``, syntax in :mod:`dms.domain.text_query`) orders by
    relevance, then id, and its page also carries a highlighted :class:`~dms.domain.Snippet`
    of each of its documents that has text, and the number of matches (``estimated_total``:
    exact, or a lower bound when the matches are more than a search ranks, ``total_exact``).
    """
    check_query(query)
    fields = uow.metadata.get_fields(wanted.field_id for wanted in query.metadata)
    page = uow.documents.search(query, fields=fields, limit=limit, after=after)
    if query.text is None:
        return page
    current = {d.id: d.current_revision_id for d in page.items if d.current_revision_id}
    snippets = uow.search.snippets(current, parse_text_query(query.text))
    return dataclasses.replace(page, snippets=snippets)


def read_revision_content(uow: UnitOfWork, store: BlobStore, revision_id: uuid.UUID) -> bytes:
    """The bytes of revision ``revision_id``, from ``store``.

    When the tenant records reads (``uow.audit.set_record_reads(True)``), the read is an event
    of the audit trail, by the unit's actor, committed with the unit of work. Raises
    :class:`~dms.errors.NotFound` for an unknown revision and
    :class:`~dms.errors.StorageError` when the store cannot give the bytes.
    """
    revision = uow.revisions.get(revision_id)
    if uow.audit.settings().record_reads:
        uow.audit.record_read(revision)
    return store.get(revision.storage_key)
