"""WHERE conditions of document searches, built from a :class:`~dms.domain.DocumentQuery`."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms.domain import DocumentQuery, FieldType, MetadataField, MetadataFilter
from dms.domain.validation import check_range_bound, check_value
from dms.schema import tenant as t

from .metadata import MetadataRepository, value_column

_d = t.documents
_LIKE_ESCAPE = "\\"


def conditions(conn: Connection, query: DocumentQuery) -> list[sa.ColumnElement[bool]]:
    """Return the conditions on ``documents`` that ``query`` asks for (AND-ed by the caller)."""
    found: list[sa.ColumnElement[bool]] = []
    if query.folder_id is not None:
        found.append(in_folder(query.folder_id, subfolders=query.include_subfolders))
    if query.tags_all:
        found.append(has_all_tags(query.tags_all))
    if query.tags_any:
        found.append(has_tags(query.tags_any))
    if query.title_contains is not None:
        found.append(title_contains(query.title_contains))
    metadata = MetadataRepository(conn)
    for wanted in query.metadata:
        found.append(metadata_matches(metadata.get_field(wanted.field_id), wanted))
    return found


def subtree_ids(folder_id: uuid.UUID) -> sa.CTE:
    """Return a recursive CTE of the ids of ``folder_id`` and its live descendants."""
    f = t.folders
    tree = (
        sa.select(f.c.id)
        .where(f.c.id == folder_id, f.c.deleted_at.is_(None))
        .cte("subtree", recursive=True)
    )
    child = f.alias("child")
    return tree.union_all(
        sa.select(child.c.id).where(child.c.parent_id == tree.c.id, child.c.deleted_at.is_(None))
    )


def in_folder(folder_id: uuid.UUID, *, subfolders: bool) -> sa.ColumnElement[bool]:
    """Return: the document is in ``folder_id`` (or, with ``subfolders``, below it)."""
    if not subfolders:
        return _d.c.folder_id == folder_id
    tree = subtree_ids(folder_id)
    return _d.c.folder_id.in_(sa.select(tree.c.id))


def has_tags(tag_ids: Iterable[uuid.UUID]) -> sa.ColumnElement[bool]:
    """Return: the document has at least one of ``tag_ids``."""
    links = t.document_tags
    return sa.exists().where(links.c.document_id == _d.c.id, links.c.tag_id.in_(list(tag_ids)))


def has_all_tags(tag_ids: Iterable[uuid.UUID]) -> sa.ColumnElement[bool]:
    """Return: the document has every one of ``tag_ids`` (true for none).

    One read of the tags' links (index-only on ``(tag_id, document_id)``), counted per
    document, instead of one semi-join per tag.
    """
    wanted = set(tag_ids)
    if len(wanted) <= 1:
        return has_tags(wanted) if wanted else sa.true()
    links = t.document_tags
    # (document_id, tag_id) is the primary key, so a count equal to len(wanted) means all.
    having_all = (
        sa.select(links.c.document_id)
        .where(links.c.tag_id.in_(list(wanted)))
        .group_by(links.c.document_id)
        .having(sa.func.count() == len(wanted))
    )
    return _d.c.id.in_(having_all)


def title_contains(text: str) -> sa.ColumnElement[bool]:
    """Return: the title contains ``text``, ignoring case; ``%`` and ``_`` match themselves."""
    escaped = "".join(_LIKE_ESCAPE + char if char in "%_\\" else char for char in text)
    return _d.c.title.ilike(f"%{escaped}%", escape=_LIKE_ESCAPE)


def metadata_matches(field: MetadataField, wanted: MetadataFilter) -> sa.ColumnElement[bool]:
    """Return: the document's value of ``field`` satisfies ``wanted``."""
    if field.field_type is FieldType.MULTI_SELECT:
        return _has_choice(field, wanted)
    values = t.document_metadata
    column = value_column(field.field_type)
    tests: list[sa.ColumnElement[bool]] = []
    if wanted.equals is not None:
        tests.append(column == check_value(field, wanted.equals))
    if wanted.at_least is not None:
        tests.append(column >= check_range_bound(field, wanted.at_least))
    if wanted.at_most is not None:
        tests.append(column <= check_range_bound(field, wanted.at_most))
    return sa.exists().where(values.c.document_id == _d.c.id, values.c.field_id == field.id, *tests)


def _has_choice(field: MetadataField, wanted: MetadataFilter) -> sa.ColumnElement[bool]:
    # Equality on a multi-select means "contains this option"; order means nothing here.
    bound: Any = wanted.at_least if wanted.at_least is not None else wanted.at_most
    if bound is not None:
        check_range_bound(field, bound)
    chosen = check_value(field, [wanted.equals])
    choices = t.document_metadata_choices
    return sa.exists().where(
        choices.c.document_id == _d.c.id,
        choices.c.field_id == field.id,
        choices.c.option_id.in_(list(chosen)),  # type: ignore[arg-type]
    )
