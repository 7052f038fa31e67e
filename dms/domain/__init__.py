"""The domain: entities, value types, search filters and input checks. No SQL in here."""

from .model import (
    Document,
    FieldOption,
    FieldType,
    Folder,
    MetadataField,
    MetadataValue,
    Revision,
    Tag,
)
from .search import Cursor, DocumentQuery, MetadataFilter, Page

__all__ = [
    "Cursor",
    "Document",
    "DocumentQuery",
    "FieldOption",
    "FieldType",
    "Folder",
    "MetadataField",
    "MetadataFilter",
    "MetadataValue",
    "Page",
    "Revision",
    "Tag",
]
