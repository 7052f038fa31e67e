"""The entities of a tenant's document store, as plain frozen dataclasses.

These are what repositories return and what applications hold on to; they know nothing of
SQL. Identifiers are UUIDs assigned by the database; timestamps are timezone-aware.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum

#: A metadata value as Python sees it: ``select`` values are option ids, ``multi_select``
#: values frozensets of option ids.
MetadataValue = str | int | Decimal | date | bool | uuid.UUID | frozenset[uuid.UUID]


class FieldType(str, Enum):
    """The type of a metadata field; each is stored in its own typed column."""

    STRING = "string"
    TEXT = "text"
    INT = "int"
    DECIMAL = "decimal"
    DATE = "date"
    BOOL = "bool"
    URL = "url"
    SELECT = "select"
    MULTI_SELECT = "multi_select"

    @property
    def has_options(self) -> bool:
        """Whether values of this type are chosen from the field's options."""
        return self in (FieldType.SELECT, FieldType.MULTI_SELECT)

    @property
    def is_ordered(self) -> bool:
        """Whether values of this type can be compared in a range filter."""
        return self in (FieldType.INT, FieldType.DECIMAL, FieldType.DATE)


@dataclass(frozen=True, kw_only=True)
class Folder:
    """A folder; ``parent_id`` is ``None`` at the top level.

    ``owner_id``: the user who holds every right on it (docs/access.md); ``None`` for a folder
    older than access control, or whose owner left the IAM. ``created_by`` (and a document's,
    a revision's ``uploaded_by``, a tag's and a field's ``created_by``) is ``None`` when a
    system principal created it: the audit trail names which.
    """

    id: uuid.UUID
    parent_id: uuid.UUID | None
    name: str
    created_by: uuid.UUID | None
    owner_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None

    @property
    def is_deleted(self) -> bool:
        """Whether the folder is in the trash."""
        return self.deleted_at is not None


@dataclass(frozen=True, kw_only=True)
class Document:
    """A document: a titled, versioned container of file revisions.

    ``version`` counts changes to the document; pass the one you read to every update.
    ``owner_id``: as :attr:`Folder.owner_id`.
    """

    id: uuid.UUID
    folder_id: uuid.UUID | None
    title: str
    current_revision_id: uuid.UUID | None
    version: int
    created_by: uuid.UUID | None
    owner_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None

    @property
    def is_deleted(self) -> bool:
        """Whether the document is in the trash."""
        return self.deleted_at is not None


@dataclass(frozen=True, kw_only=True)
class Revision:
    """One immutable file revision of a document, numbered 1, 2, 3 ... without gaps."""

    id: uuid.UUID
    document_id: uuid.UUID
    revision_no: int
    storage_key: str
    sha256: str
    size_bytes: int
    mime_type: str
    uploaded_by: uuid.UUID | None
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class Tag:
    """A tag; names are unique per tenant ignoring case."""

    id: uuid.UUID
    name: str
    created_by: uuid.UUID | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True)
class FieldOption:
    """A choice of a select or multi-select field; its id stays when it is renamed."""

    id: uuid.UUID
    field_id: uuid.UUID
    value: str
    position: int
    retired_at: datetime | None

    @property
    def is_retired(self) -> bool:
        """Whether the option can no longer be chosen (existing values keep it)."""
        return self.retired_at is not None


@dataclass(frozen=True, kw_only=True)
class MetadataField:
    """A metadata field definition with its options (empty unless it is a select type)."""

    id: uuid.UUID
    name: str
    field_type: FieldType
    required: bool
    default: MetadataValue | None
    options: tuple[FieldOption, ...]
    created_by: uuid.UUID | None
    created_at: datetime
    updated_at: datetime

    def active_options(self) -> tuple[FieldOption, ...]:
        """Return the options that can still be chosen."""
        return tuple(option for option in self.options if not option.is_retired)


@dataclass(frozen=True, kw_only=True)
class NewFolder:
    """A folder to create with others in one statement (``FolderRepository.add_many``)."""

    name: str
    parent_id: uuid.UUID | None


@dataclass(frozen=True, kw_only=True)
class NewDocument:
    """A document to create with others in one statement (``DocumentRepository.add_many``)."""

    title: str
    folder_id: uuid.UUID | None


@dataclass(frozen=True, kw_only=True)
class NewRevision:
    """A revision to append with others in one statement (``RevisionRepository.add_many``)."""

    document_id: uuid.UUID
    storage_key: str
    sha256: str
    size_bytes: int
    mime_type: str


@dataclass(frozen=True, kw_only=True)
class Blob:
    """A content-addressed blob of a tenant: the bytes of one SHA-256, stored once."""

    storage_key: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True, kw_only=True)
class ImportedEntry:
    """Where an imported folder or document came from (a row of the import provenance).

    ``source_name`` and ``source_path`` are the bytes the file system gave, whatever their
    encoding; ``parent_id`` is the folder the entry was imported into (``None``: top level).
    ``sha256`` is the content last imported (documents only). ``in_trash`` says whether the
    folder or document is in the trash now.
    """

    id: uuid.UUID
    parent_id: uuid.UUID | None
    source_name: bytes
    source_path: bytes
    folder_id: uuid.UUID | None
    document_id: uuid.UUID | None
    sha256: str | None
    imported_by: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    in_trash: bool
