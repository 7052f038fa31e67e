"""Use cases that span more than one repository, each inside the caller's unit of work.

The caller opens the :class:`~dms.uow.UnitOfWork` and commits it; a use case never commits,
so several can make one transaction::

    with UnitOfWork(engine, tenant="acme", user_id=alice) as uow:
        doc = create_document(uow, title="Offer.pdf", folder_id=folder.id, tag_ids=[urgent.id])
        add_revision(uow, doc.id, storage_key="blobs/1", sha256=digest, size_bytes=10,
                     mime_type="application/pdf")
        uow.commit()
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dms.domain import Document, MetadataField, Revision
from dms.errors import ValidationError
from dms.uow import UnitOfWork


@dataclass(frozen=True, kw_only=True)
class FolderRemoval:
    """What a folder deletion or restore touched."""

    folder_ids: tuple[uuid.UUID, ...]
    document_count: int


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
    end up with a value, else :class:`ValidationError` and nothing is written. Returns the
    document as stored at the end: writing its tags and values bumped its version, so pass
    this one's ``version`` to the next update.
    """
    with uow.savepoint():
        document = uow.documents.add(title=title, folder_id=folder_id)
        uow.tags.tag([document.id], tag_ids)
        values = _with_defaults(uow.metadata.list_fields(), metadata or {})
        uow.metadata.set_values(document.id, values)
        _require_complete(uow, document)
    return uow.documents.get(document.id)


def _with_defaults(
    fields: list[MetadataField], given: Mapping[uuid.UUID, object]
) -> dict[uuid.UUID, object]:
    defaults: dict[uuid.UUID, object] = {
        field.id: field.default for field in fields if field.default is not None
    }
    return {**defaults, **given}


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

    Concurrent uploads to one document queue on its row lock and get consecutive numbers.
    """
    revision = uow.revisions.add(
        document_id,
        storage_key=storage_key,
        sha256=sha256,
        size_bytes=size_bytes,
        mime_type=mime_type,
    )
    uow.documents.set_current_revision(document_id, revision.id)
    return revision


def delete_folder(uow: UnitOfWork, folder_id: uuid.UUID) -> FolderRemoval:
    """Put a folder, its live subfolders and their live documents in the trash."""
    folder_ids, deleted_at = uow.folders.soft_delete_subtree(folder_id)
    count = uow.documents.soft_delete_in_folders(folder_ids, deleted_at)
    return FolderRemoval(folder_ids=tuple(folder_ids), document_count=count)


def restore_folder(uow: UnitOfWork, folder_id: uuid.UUID) -> FolderRemoval:
    """Restore a deleted folder with the subfolders and documents deleted together with it.

    Documents and folders deleted on their own earlier stay in the trash. Raises
    :class:`~dms.errors.AlreadyExists` on a name conflict, and nothing is restored.
    """
    with uow.savepoint():
        _, folder_ids, deleted_at = uow.folders.restore_subtree(folder_id)
        count = uow.documents.restore_in_folders(folder_ids, deleted_at)
    return FolderRemoval(folder_ids=tuple(folder_ids), document_count=count)
