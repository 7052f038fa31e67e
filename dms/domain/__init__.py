"""The domain: entities, value types, search filters and input checks. No SQL in here."""

from .model import (
    Blob,
    Document,
    FieldOption,
    FieldType,
    Folder,
    ImportedEntry,
    MetadataField,
    MetadataValue,
    NewDocument,
    NewFolder,
    NewRevision,
    Revision,
    Tag,
)
from .search import Cursor, DocumentQuery, MetadataFilter, Page, Snippet

__all__ = [
    "Blob",
    "Cursor",
    "Document",
    "DocumentQuery",
    "FieldOption",
    "FieldType",
    "Folder",
    "ImportedEntry",
    "MetadataField",
    "MetadataFilter",
    "MetadataValue",
    "NewDocument",
    "NewFolder",
    "NewRevision",
    "Page",
    "Revision",
    "Snippet",
    "Tag",
]
