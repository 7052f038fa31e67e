"""The writes of one planned batch, in its transaction: folders, documents, revisions, provenance.

Each kind of row is written in one statement per level (folders) or per attempt (documents):
a name the database refuses because a concurrent writer took it is chosen again
(:meth:`~.plan.TreePlan.rename_again`) and retried, up to :data:`NAME_ATTEMPTS` times.
"""

from __future__ import annotations

import uuid

from dms.domain import NewFolder, NewRevision
from dms.errors import ValidationError
from dms.repositories.imports import NewImportedDocument, NewImportedEntry
from dms.services import set_values
from dms.uow import UnitOfWork

from . import plan
from .plan import DOCUMENT, FOLDER, Batch, NewFile, TreePlan
from .report import SkipReason

#: Attempts at a free name when concurrent writers keep taking the chosen one.
NAME_ATTEMPTS = 10


def defaults(uow: UnitOfWork) -> dict[uuid.UUID, object]:
    """The values every new document gets; refuse a required field that has none."""
    fields = uow.metadata.list_fields()
    unfillable = [f.name for f in fields if f.required and f.default is None]
    if unfillable:
        raise ValidationError(
            f"the tenant's required metadata field(s) {', '.join(map(repr, unfillable))} have "
            "no default: an import cannot fill them; give them a default first"
        )
    return {f.id: f.default for f in fields if f.default is not None}


def create_folders(uow: UnitOfWork, batch: Batch, tree: TreePlan) -> None:
    """Create the batch's new folders, shallowest first (parents before children)."""
    for depth in sorted({f.entry.depth for f in batch.folders}):
        pending = [f for f in batch.folders if f.entry.depth == depth]
        for _ in range(NAME_ATTEMPTS):
            pending = [f for f in pending if not tree.parent_skipped(f.entry)]
            if not pending:
                break
            pending = _insert_folders(uow, batch, tree, pending)
        for folder in pending:
            tree.skip(folder.entry, SkipReason.NAME_TAKEN, "no free name found")


def _insert_folders(
    uow: UnitOfWork, batch: Batch, tree: TreePlan, pending: list[plan.NewFolder]
) -> list[plan.NewFolder]:
    """Insert ``pending``; return those refused by the database, renamed for another try."""
    created = uow.folders.add_many(
        [NewFolder(name=f.name, parent_id=tree.parent_id(f.entry)) for f in pending]
    )
    again: list[plan.NewFolder] = []
    for planned, folder_id in zip(pending, created, strict=True):
        entry = planned.entry
        if folder_id is None:
            name = tree.rename_again(entry, FOLDER, planned.name)
            if name is not None:
                again.append(plan.NewFolder(entry=entry, name=name))
            continue
        batch.provenance.append(
            NewImportedEntry(
                parent_id=tree.parent_id(entry),
                source_name=entry.name,
                source_path=entry.path,
                folder_id=folder_id,
            )
        )
        tree.folder_created(entry, folder_id)
    return again


def create_documents(
    uow: UnitOfWork,
    batch: Batch,
    tree: TreePlan,
    *,
    keys: dict[str, str],
    values: dict[uuid.UUID, object],
) -> None:
    """Name and create the documents of the batch's new files, with revisions and provenance.

    ``keys``: each content's storage key by SHA-256; ``values``: the metadata every new
    document gets (:func:`defaults`). Files left out (their folder skipped, or no free name)
    leave ``batch.files``.
    """
    pending: list[tuple[NewFile, str]] = []
    kept: list[NewFile] = []
    for new in batch.files:
        if new.known_document is not None:
            kept.append(new)
        elif tree.skip_orphan(new.entry):
            continue
        else:
            title = tree.name(uow, new.entry, DOCUMENT)
            if title is not None:
                pending.append((new, title))
    for _ in range(NAME_ATTEMPTS):
        if not pending:
            break
        pending = _insert_documents(uow, tree, pending, kept=kept, keys=keys, values=values)
    for new, _title in pending:
        tree.skip(new.entry, SkipReason.NAME_TAKEN, "no free name found")
    batch.files = kept


def _insert_documents(
    uow: UnitOfWork,
    tree: TreePlan,
    pending: list[tuple[NewFile, str]],
    *,
    kept: list[NewFile],
    keys: dict[str, str],
    values: dict[uuid.UUID, object],
) -> list[tuple[NewFile, str]]:
    """Create ``pending``; return those whose title was taken, renamed for another try."""
    created = uow.imports.import_documents(
        [
            NewImportedDocument(
                title=title,
                folder_id=tree.parent_id(new.entry),
                source_name=new.entry.name,
                source_path=new.entry.path,
                storage_key=keys[new.read.content.sha256],
                sha256=new.read.content.sha256,
                size_bytes=new.read.content.size_bytes,
                mime_type=new.read.mime_type,
            )
            for new, title in pending
        ]
    )
    again: list[tuple[NewFile, str]] = []
    for (new, title), imported in zip(pending, created, strict=True):
        if imported is None:
            name = tree.rename_again(new.entry, DOCUMENT, title)
            if name is not None:
                again.append((new, name))
            continue
        new.document_id, new.revision_id = imported.document_id, imported.revision_id
        kept.append(new)
        tree.counts.documents_created += 1
        if values:
            set_values(uow, imported.document_id, values)
    return again


def add_revisions(
    uow: UnitOfWork, batch: Batch, tree: TreePlan, keys: dict[str, str]
) -> list[uuid.UUID]:
    """Add the new revisions of known documents and make them current.

    Return the revision ids of every file of the batch (new documents got theirs with them, in
    :func:`create_documents`).
    """
    changed = [f for f in batch.files if f.known_document is not None]
    added = uow.revisions.add_many(
        [
            NewRevision(
                document_id=f.known_document,
                storage_key=keys[f.read.content.sha256],
                sha256=f.read.content.sha256,
                size_bytes=f.read.content.size_bytes,
                mime_type=f.read.mime_type,
            )
            for f in changed
            if f.known_document is not None
        ]
    )
    for new, revision_id in zip(changed, added, strict=True):
        new.revision_id = revision_id
    uow.documents.set_current_revisions(
        {f.known_document: r for f, r in zip(changed, added, strict=True) if f.known_document}
    )
    tree.counts.revisions_added += len(added)
    return [f.revision_id for f in batch.files if f.revision_id is not None]


def record_provenance(uow: UnitOfWork, batch: Batch) -> None:
    """Record where the batch's new folders and documents came from, and what changed files hold."""
    imports = uow.imports
    imports.record(batch.provenance)
    imports.record_content(
        {f.known_document: f.read.content.sha256 for f in batch.files if f.known_document}
    )
