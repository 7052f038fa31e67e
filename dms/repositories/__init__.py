"""Repositories: all SQL of the tenant tables, one module per aggregate, as Core expressions.

Each repository works on the tenant-routed connection of a
:class:`~dms.uow.UnitOfWork` and speaks in :mod:`dms.domain` objects.
"""

from .documents import DocumentRepository
from .folders import FolderRepository
from .metadata import MetadataRepository
from .revisions import RevisionRepository
from .tags import TagRepository

__all__ = [
    "DocumentRepository",
    "FolderRepository",
    "MetadataRepository",
    "RevisionRepository",
    "TagRepository",
]
