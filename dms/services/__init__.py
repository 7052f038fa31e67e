"""Use cases: what an application does in a tenant, each inside the caller's unit of work.

The caller opens the :class:`~dms.uow.UnitOfWork` and commits it; a use case never commits,
so several can make one transaction::

    with UnitOfWork(engine, tenant="acme", user_id=alice) as uow:
        doc = create_document(uow, title="Offer.pdf", folder_id=folder.id, tag_ids=[urgent.id])
        add_revision(uow, doc.id, storage_key="blobs/1", sha256=digest, size_bytes=10,
                     mime_type="application/pdf")
        uow.commit()

A use case holds the rules that span aggregates, which no single repository may: tagging a
document or setting one of its values bumps its version, a required field reaches every
document, a search reads the fields its filters name. Work on one aggregate alone goes straight
to its repository (``uow.folders.add``, ``uow.documents.rename``, ...). One module per
aggregate that a use case starts from: :mod:`.documents`, :mod:`.folders`, :mod:`.tags`,
:mod:`.metadata`.
"""

from .documents import (
    EXTRACT_REVISION,
    EXTRACTION_BATCH,
    add_revision,
    create_document,
    extraction_job,
    extraction_jobs,
    read_revision_content,
    search_documents,
)
from .folders import FolderRemoval, delete_folder, restore_folder
from .metadata import clear_value, define_field, set_value, set_values
from .tags import tag_documents, untag_documents

__all__ = [
    "EXTRACTION_BATCH",
    "EXTRACT_REVISION",
    "FolderRemoval",
    "add_revision",
    "clear_value",
    "create_document",
    "define_field",
    "delete_folder",
    "extraction_job",
    "extraction_jobs",
    "read_revision_content",
    "restore_folder",
    "search_documents",
    "set_value",
    "set_values",
    "tag_documents",
    "untag_documents",
]
