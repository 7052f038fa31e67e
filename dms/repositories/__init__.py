"""Repositories: all SQL of the tenant tables, one module per aggregate, as Core expressions.

Each repository works on the tenant-routed connection of a
:class:`~dms.uow.UnitOfWork` and speaks in :mod:`dms.domain` objects.

Each module builds the SQL of its own tables only. Where a statement needs a condition on
another aggregate's table (the live folder a document goes into, the tags or values a search
asks for), the module that owns that table builds it, as a plain expression that reads
nothing; the one exception, named where it is, is a required field's backfill, which reads
``documents`` as the rows to fill. A repository never creates another repository: rules that
span aggregates (a tag or a value bumps its document's version, a required field reaches every
document, a search needs its fields) are use cases in :mod:`dms.services`. The modules import
each other in one direction only (``documents`` uses ``folders``, ``tags`` and ``metadata``;
``revisions`` uses ``documents``; ``documents`` uses ``search`` for content searches), which
``tests/unit/test_layers.py`` checks.
"""

from .access import AccessRepository
from .audit import AuditRepository
from .blobs import BlobRepository
from .documents import DocumentRepository
from .folders import FolderRepository
from .imports import ImportRepository
from .metadata import MetadataRepository
from .revisions import RevisionRepository
from .search import SearchRepository
from .tags import TagRepository

__all__ = [
    "AccessRepository",
    "AuditRepository",
    "BlobRepository",
    "DocumentRepository",
    "FolderRepository",
    "ImportRepository",
    "MetadataRepository",
    "RevisionRepository",
    "SearchRepository",
    "TagRepository",
]
