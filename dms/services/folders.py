"""Use cases of folders: a folder goes to the trash, and comes back, with what it holds."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from dms.uow import UnitOfWork


@dataclass(frozen=True, kw_only=True)
class FolderRemoval:
    """What a folder deletion or restore touched."""

    folder_ids: tuple[uuid.UUID, ...]
    document_count: int


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
