"""Processing of uploaded revisions: the job kind ``dms`` ships, and its handler.

``revision.verify`` reads a revision's bytes from the blob store, checks them against the
recorded SHA-256 and size, and records the outcome on the document as metadata: ``Integrity``
(``verified``, ``mismatch`` or ``missing``) and, for text files, a ``Preview`` of the first
characters. It runs in the unit of work of the job's tenant, so its writes commit together with
the job's completion (exactly once) or not at all.

Enqueue it in the transaction that adds the revision (:func:`enqueue_verification`): a rolled
back upload takes its job with it, and the idempotency key makes a second enqueue a no-op.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping

from dms import jobs
from dms.domain import FieldType, Revision
from dms.errors import NotFound, ValidationError
from dms.jobs import Enqueued, Handler, Job
from dms.services import clear_value, define_field, set_value
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork

VERIFY_REVISION = "revision.verify"
INTEGRITY_FIELD = "Integrity"
INTEGRITY_OUTCOMES = ("verified", "mismatch", "missing")
PREVIEW_FIELD = "Preview"
PREVIEW_CHARS = 200


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


def _revision_id(job: Job) -> uuid.UUID:
    payload = job.payload
    try:
        return uuid.UUID(str(payload["revision_id"]))
    except (TypeError, KeyError, ValueError):
        raise ValidationError(
            f"job {job.id}: payload needs a revision_id, got {payload!r}"
        ) from None


def _outcome(store: LocalBlobStore, revision: Revision) -> tuple[str, str | None]:
    try:
        content = store.read(revision.storage_key)
    except NotFound:
        return "missing", None
    intact = (
        len(content) == revision.size_bytes
        and hashlib.sha256(content).hexdigest() == revision.sha256
    )
    if not intact:
        return "mismatch", None
    if not revision.mime_type.startswith("text/"):
        return "verified", None
    return "verified", content[: PREVIEW_CHARS * 4].decode("utf-8", "replace")[:PREVIEW_CHARS]


def verify_revision(store: LocalBlobStore) -> Handler:
    """The handler of ``revision.verify`` jobs, reading blobs from ``store``."""

    def handle(uow: UnitOfWork, job: Job, /) -> None:
        revision = uow.revisions.get(_revision_id(job))
        document = uow.documents.get(revision.document_id, include_deleted=True)
        if document.current_revision_id != revision.id:
            return  # superseded: the document's metadata describes its current file only
        outcome, preview = _outcome(store, revision)
        set_value(uow, document.id, uow.metadata.get_field_by_name(INTEGRITY_FIELD).id, outcome)
        preview_field = uow.metadata.get_field_by_name(PREVIEW_FIELD)
        if preview:
            set_value(uow, document.id, preview_field.id, preview)
        else:
            clear_value(uow, document.id, preview_field.id)

    return handle


def handlers(store: LocalBlobStore) -> Mapping[str, Handler]:
    """Every job kind ``dms`` ships, mapped to its handler."""
    return {VERIFY_REVISION: verify_revision(store)}
