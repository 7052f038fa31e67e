"""Processing of uploaded revisions: the job kinds ``dms`` ships, and their handlers.

``revision.extract`` (:data:`~dms.services.EXTRACT_REVISION`, enqueued with every revision by
:func:`dms.services.add_revision`, ``dms import`` and the seed) reads a revision's bytes,
extracts their text (:mod:`dms.extraction`) and stores it in the tenant's search tables, which
indexes it in the same transaction. Bytes that cannot be read (corrupt, encrypted) or that do not
match the revision's SHA-256 fail the job for good with the reason; a revision that is no longer
its document's current one is skipped (search indexes current revisions only).

``revision.verify`` reads a revision's bytes from the blob store, checks them against the
recorded SHA-256 and size, and records the outcome on the document as metadata: ``Integrity``
(``verified``, ``mismatch`` or ``missing``) and, for text, a ``Preview`` of the first
characters. It runs in the unit of work of the job's tenant, so its writes commit together with
the job's completion (exactly once) or not at all.

The preview is decoded from the bytes themselves, never from the declared type alone
(:mod:`dms.detection`): compressed files are previewed by their text, UTF-16 and legacy 8-bit
texts are decoded, binary data gets no preview, and no NUL or invalid character ever reaches
the database. A job that can never succeed (a payload without a revision, a tenant without the
processing fields, a value the database refuses) raises
:class:`~dms.errors.PermanentFailure` with its reason and goes to the dead letter at once
instead of being retried. A job whose revision no longer exists (its document was purged) has
nothing left to verify and is done. A missing blob is recorded as ``missing`` only when the
store holds the tenant's other blobs: a store that holds none of them is the wrong store, and
the job fails with :class:`~dms.errors.StorageError` (retried, then dead) saying which store it
asked (:func:`require_plausible_store`).

``audit.sweep`` and ``audit.seal`` seal every tenant's audit trail (:mod:`dms.sealing`).

Enqueue it in the transaction that adds the revision (:func:`enqueue_verification`, or
:func:`verification_jobs` with :func:`dms.jobs.enqueue_many` for a batch): a rolled back upload
takes its job with it, and the idempotency key makes a second enqueue a no-op.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Mapping

from dms import jobs
from dms.detection import preview
from dms.domain import FieldType, Revision
from dms.errors import (
    NotFound,
    PermanentFailure,
    StorageError,
    UnreadableContent,
    ValidationError,
)
from dms.extraction import DEFAULT_EXTRACTORS, ExtractorRegistry, extract_text
from dms.jobs import Enqueued, Handler, Job, NewJob
from dms.sealing import SEAL_AUDIT_TRAIL, SWEEP_AUDIT_TRAILS, seal_batch, sweep_audit_trails
from dms.services import (
    EXTRACT_REVISION,
    clear_value,
    define_field,
    extraction_job,
    set_value,
)
from dms.storage import BlobStore
from dms.uow import UnitOfWork

VERIFY_REVISION = "revision.verify"
INTEGRITY_FIELD = "Integrity"
INTEGRITY_OUTCOMES = ("verified", "mismatch", "missing")
PREVIEW_FIELD = "Preview"
PREVIEW_CHARS = 200
#: Other blobs of a tenant checked when one is missing: none of them there means a wrong store.
STORE_SAMPLE = 5

_log = logging.getLogger(__name__)


def define_processing_fields(uow: UnitOfWork) -> None:
    """Define the metadata fields the handler writes, unless the tenant has them already."""
    try:
        uow.metadata.get_field_by_name(INTEGRITY_FIELD)
    except NotFound:
        define_field(
            uow, name=INTEGRITY_FIELD, field_type=FieldType.SELECT, options=INTEGRITY_OUTCOMES
        )
    try:
        uow.metadata.get_field_by_name(PREVIEW_FIELD)
    except NotFound:
        define_field(uow, name=PREVIEW_FIELD, field_type=FieldType.TEXT)


def enqueue_verification(uow: UnitOfWork, revision: Revision) -> Enqueued:
    """Enqueue the verification of ``revision`` in the unit of work's transaction."""
    return jobs.enqueue(
        uow,
        VERIFY_REVISION,
        {"revision_id": str(revision.id)},
        tenant=uow.tenant,
        idempotency_key=f"{VERIFY_REVISION}:{revision.id}",
    )


def verification_jobs(tenant: str, revision_ids: Iterable[uuid.UUID]) -> list[NewJob]:
    """The verification jobs of ``revision_ids``, for :func:`dms.jobs.enqueue_many`.

    The same payload and idempotency key as :func:`enqueue_verification`: a revision is
    verified once however it was enqueued.
    """
    return [
        NewJob(
            kind=VERIFY_REVISION,
            payload={"revision_id": str(revision_id)},
            tenant=tenant,
            idempotency_key=f"{VERIFY_REVISION}:{revision_id}",
        )
        for revision_id in revision_ids
    ]


def _revision_id(job: Job) -> uuid.UUID:
    payload = job.payload
    try:
        return uuid.UUID(str(payload["revision_id"]))
    except (TypeError, KeyError, ValueError, AttributeError):
        raise PermanentFailure(
            f"job {job.id}: payload needs a revision_id, got {payload!r:.200}"
        ) from None


def _outcome(uow: UnitOfWork, store: BlobStore, revision: Revision) -> tuple[str, str | None]:
    try:
        content = store.get(revision.storage_key)
    except NotFound:
        require_plausible_store(uow, store, revision)
        return "missing", None
    intact = (
        len(content) == revision.size_bytes
        and hashlib.sha256(content).hexdigest() == revision.sha256
    )
    if not intact:
        return "mismatch", None
    return "verified", preview(content, revision.mime_type, chars=PREVIEW_CHARS)


def require_plausible_store(uow: UnitOfWork, store: BlobStore, revision: Revision) -> None:
    """Raise :class:`~dms.errors.StorageError` if ``store`` holds no blob of the tenant it checks.

    Called when the blob of ``revision`` is missing: a missing file is an outcome to record,
    but a store that holds none of :data:`STORE_SAMPLE` other blobs of the tenant is the wrong
    store (a wrong ``--blobs``, an unmounted disk, another bucket), and recording ``missing``
    on every document would hide that. The job fails instead (and is retried with backoff),
    saying which store was asked.
    """
    others = absent_sample(uow, store, other_than=revision.id)
    if others:
        raise StorageError(
            f"the blob store {store.location} holds neither the blob of revision {revision.id} "
            f"nor any of {len(others)} other blobs of tenant {uow.tenant}: is it the store "
            "these files were written to? (dms worker --blobs, DMS_BLOBS)"
        )


def absent_sample(
    uow: UnitOfWork, store: BlobStore, *, other_than: uuid.UUID | None = None
) -> list[str]:
    """Sampled storage keys of the tenant, if ``store`` holds none of them; else ``[]``.

    Up to :data:`STORE_SAMPLE` revisions (not ``other_than``); ``[]`` too for no revision.
    """
    sample = uow.revisions.some_storage_keys(limit=STORE_SAMPLE, other_than=other_than)
    return [] if any(store.exists(key) for key in sample) else sample


def verify_revision(store: BlobStore) -> Handler[UnitOfWork]:
    """The handler of ``revision.verify`` jobs, reading blobs from ``store``."""

    def handle(uow: UnitOfWork, job: Job, /) -> None:
        revision_id = _revision_id(job)
        try:
            revision = uow.revisions.get(revision_id)
        except NotFound:
            _log.info(
                "job %s: revision %s is gone (purged): nothing to verify", job.id, revision_id
            )
            return
        document = uow.documents.get(revision.document_id, include_deleted=True)
        if document.current_revision_id != revision.id:
            return  # superseded: the document's metadata describes its current file only
        outcome, shown = _outcome(uow, store, revision)
        try:
            _record(uow, document.id, outcome, shown)
        except (NotFound, ValidationError) as exc:
            # Retrying cannot change a missing field or a refused value: say why, once.
            raise PermanentFailure(f"job {job.id}: revision {revision.id}: {exc}") from exc

    return handle


def _record(uow: UnitOfWork, document_id: uuid.UUID, outcome: str, shown: str | None) -> None:
    """Write the outcome and the preview (or clear an earlier preview) on the document."""
    integrity = uow.metadata.get_field_by_name(INTEGRITY_FIELD)
    preview_field = uow.metadata.get_field_by_name(PREVIEW_FIELD)
    set_value(uow, document_id, integrity.id, outcome)
    if shown:
        set_value(uow, document_id, preview_field.id, shown)
    else:
        clear_value(uow, document_id, preview_field.id)


def extract_revision(
    store: BlobStore, extractors: ExtractorRegistry = DEFAULT_EXTRACTORS
) -> Handler[UnitOfWork]:
    """The handler of ``revision.extract`` jobs, reading blobs from ``store``.

    A job names one revision or many (:func:`dms.services.extraction_jobs`). Revisions that are
    no longer their documents' current ones are skipped. A revision whose bytes cannot be read
    fails its job for good (:class:`~dms.errors.PermanentFailure`, with the reason); in a job of
    many, the others are stored and that revision gets a job of its own, which fails so.
    """

    def handle(uow: UnitOfWork, job: Job, /) -> None:
        wanted = _extraction_ids(job)
        texts: dict[uuid.UUID, tuple[str, tuple[str, ...]]] = {}
        unreadable: dict[uuid.UUID, str] = {}
        for revision in uow.revisions.current_among(wanted):
            try:
                extracted = extract_text(
                    _intact_content(uow, store, revision), revision.mime_type, extractors
                )
            except UnreadableContent as exc:
                unreadable[revision.id] = str(exc)
            else:
                texts[revision.id] = (extracted.extractor, extracted.parts)
        uow.search.store_texts(texts)
        if len(wanted) == 1 and unreadable:
            [(revision_id, reason)] = unreadable.items()
            raise PermanentFailure(f"job {job.id}: revision {revision_id}: {reason}")
        jobs.enqueue_many(uow, [extraction_job(uow.tenant, r) for r in sorted(unreadable)])

    return handle


def _extraction_ids(job: Job) -> list[uuid.UUID]:
    payload = job.payload
    try:
        if isinstance(payload, dict) and "revision_ids" in payload:
            ids = [uuid.UUID(str(value)) for value in payload["revision_ids"]]
            if ids:
                return ids
        return [_revision_id(job)]
    except (TypeError, ValueError) as exc:
        raise PermanentFailure(
            f"job {job.id}: payload needs revision_ids, got {payload!r:.200}"
        ) from exc


def _intact_content(uow: UnitOfWork, store: BlobStore, revision: Revision) -> bytes:
    try:
        content = store.get(revision.storage_key)
    except NotFound as exc:
        require_plausible_store(uow, store, revision)
        raise UnreadableContent(f"its blob {revision.storage_key!r} is missing") from exc
    if len(content) != revision.size_bytes or (
        hashlib.sha256(content).hexdigest() != revision.sha256
    ):
        raise UnreadableContent("the stored bytes do not match its SHA-256")
    return content


def handlers(
    store: BlobStore, *, extractors: ExtractorRegistry = DEFAULT_EXTRACTORS
) -> Mapping[str, Handler[UnitOfWork]]:
    """Every job kind ``dms`` ships, mapped to its handler.

    ``extractors``: see :mod:`dms.extraction` for adding OCR or office formats. A
    :class:`dms.DocumentWorker` given the sealing kinds keeps their schedule registered.
    """
    return {
        VERIFY_REVISION: verify_revision(store),
        EXTRACT_REVISION: extract_revision(store, extractors),
        SWEEP_AUDIT_TRAILS: sweep_audit_trails,
        SEAL_AUDIT_TRAIL: seal_batch,
    }
