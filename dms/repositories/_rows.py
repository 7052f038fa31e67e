"""Mapping of result rows to domain objects, shared by the repositories."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Row

from dms.domain import Document, FieldOption, Folder, Revision, Tag
from dms.schema import tenant as t

#: Columns that make a :class:`~dms.domain.Document`, in one place for every query.
DOCUMENT_COLUMNS: Sequence[sa.Column[Any]] = tuple(t.documents.c)
FOLDER_COLUMNS: Sequence[sa.Column[Any]] = tuple(t.folders.c)
REVISION_COLUMNS: Sequence[sa.Column[Any]] = tuple(t.file_revisions.c)
TAG_COLUMNS: Sequence[sa.Column[Any]] = tuple(t.tags.c)
OPTION_COLUMNS: Sequence[sa.Column[Any]] = (
    t.metadata_field_options.c.id,
    t.metadata_field_options.c.field_id,
    t.metadata_field_options.c.value,
    t.metadata_field_options.c.position,
    t.metadata_field_options.c.retired_at,
)


_T = TypeVar("_T")


def _build(cls: type[_T], row: Row[Any]) -> _T:
    # Queries may select more than the entity (sort keys, depths): take only its fields.
    mapping = row._mapping
    return cls(**{f.name: mapping[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def document(row: Row[Any]) -> Document:
    """Return the document in ``row``."""
    return _build(Document, row)


def folder(row: Row[Any]) -> Folder:
    """Return the folder in ``row``."""
    return _build(Folder, row)


def revision(row: Row[Any]) -> Revision:
    """Return the revision in ``row``."""
    return _build(Revision, row)


def tag(row: Row[Any]) -> Tag:
    """Return the tag in ``row``."""
    return _build(Tag, row)


def option(row: Row[Any]) -> FieldOption:
    """Return the field option in ``row``."""
    return _build(FieldOption, row)
