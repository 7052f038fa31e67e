"""Every SQL expression on ``tags`` and ``document_tags``.

Linking documents to tags changes what a reader of those documents saw, so it bumps their
versions; that rule spans two aggregates and lives in :func:`dms.services.tag_documents`. A
search by tags takes its conditions from :func:`has_any` and :func:`has_all`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Row

from dms.domain import Tag
from dms.domain.validation import (
    TAG_NAME_MAX_CHARS,
    check_id,
    check_ids,
    check_name,
    check_text,
)
from dms.errors import NotFound
from dms.schema import tenant as t

from . import _rows
from ._base import Repository
from .errors import translated

_t = t.tags
_links = t.document_tags
COLUMNS = tuple(_t.c)


def tag(row: Row[Any]) -> Tag:
    """Return the tag in ``row``."""
    return _rows.build(Tag, row)


def has_any(document_id: sa.ColumnElement[uuid.UUID], tag_ids: Iterable[uuid.UUID]) -> sa.Exists:
    """Return: the document ``document_id`` has at least one of ``tag_ids``."""
    return sa.exists().where(
        _links.c.document_id == document_id, _links.c.tag_id.in_(list(tag_ids))
    )


def has_all(
    document_id: sa.ColumnElement[uuid.UUID], tag_ids: Iterable[uuid.UUID]
) -> sa.ColumnElement[bool]:
    """Return: the document ``document_id`` has every one of ``tag_ids`` (true for none).

    One read of the tags' links (index-only on ``(tag_id, document_id)``), counted per
    document, instead of one semi-join per tag.
    """
    wanted = set(tag_ids)
    if len(wanted) <= 1:
        return has_any(document_id, wanted) if wanted else sa.true()
    # (document_id, tag_id) is the primary key, so a count equal to len(wanted) means all.
    having_all = (
        sa.select(_links.c.document_id)
        .where(_links.c.tag_id.in_(list(wanted)))
        .group_by(_links.c.document_id)
        .having(sa.func.count() == len(wanted))
    )
    return document_id.in_(having_all)


class TagRepository(Repository):
    """Tags of one tenant and their links to documents."""

    def add(self, *, name: str) -> Tag:
        """Create a tag; raises :class:`AlreadyExists` if one has the name, ignoring case."""
        check_name("tag", name, max_chars=TAG_NAME_MAX_CHARS)
        author = self._actor()
        with translated(self._conn, f"tag {name!r}", user=author):
            row = self._execute(
                sa.insert(_t).values(name=name, created_by=author).returning(*COLUMNS)
            ).one()
        return tag(row)

    def get(self, tag_id: uuid.UUID) -> Tag:
        """Return the tag, or raise :class:`NotFound`."""
        check_id("tag", tag_id)
        return self._one(_t.c.id == tag_id, f"tag {tag_id} does not exist")

    def get_by_name(self, name: str) -> Tag:
        """Return the tag called ``name`` (ignoring case), or raise :class:`NotFound`."""
        check_text("tag name", name)
        condition = sa.func.lower(_t.c.name) == sa.func.lower(name)
        return self._one(condition, f"tag {name!r} does not exist")

    def all(self) -> list[Tag]:
        """Return every tag, ordered by name."""
        rows = self._execute(sa.select(*COLUMNS).order_by(sa.func.lower(_t.c.name), _t.c.id))
        return [tag(row) for row in rows]

    def rename(self, tag_id: uuid.UUID, *, name: str) -> Tag:
        """Rename a tag; links stay."""
        check_id("tag", tag_id)
        check_name("tag", name, max_chars=TAG_NAME_MAX_CHARS)
        with translated(self._conn, f"tag {name!r}"):
            row = self._execute(
                sa.update(_t)
                .where(_t.c.id == tag_id)
                .values(name=name, updated_at=sa.func.now())
                .returning(*COLUMNS)
            ).one_or_none()
        if row is None:
            raise NotFound(f"tag {tag_id} does not exist")
        return tag(row)

    def delete(self, tag_id: uuid.UUID) -> None:
        """Delete a tag and its links to documents."""
        check_id("tag", tag_id)
        with translated(self._conn, f"tag {tag_id}"):
            deleted = self._execute(
                sa.delete(_t).where(_t.c.id == tag_id).returning(_t.c.id)
            ).one_or_none()
        if deleted is None:
            raise NotFound(f"tag {tag_id} does not exist")

    def link(
        self, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]
    ) -> list[uuid.UUID]:
        """Link every document to every tag in one statement; existing links stay as they are.

        Returns the document of each new link (a document once per tag it gained). Raises
        :class:`NotFound` for an unknown document or tag, and links nothing then. Use
        :func:`dms.services.tag_documents`, which also bumps the documents' versions.
        """
        documents = set(check_ids("document", document_ids))
        tags = set(check_ids("tag", tag_ids))
        rows = [
            {"document_id": document_id, "tag_id": tag_id}
            for document_id in documents
            for tag_id in tags
        ]
        if not rows:
            return []
        with translated(self._conn, f"links of documents {sorted(documents)}"):
            linked = self._execute(
                insert(_links).values(rows).on_conflict_do_nothing().returning(_links.c.document_id)
            ).scalars()
            return list(linked)

    def unlink(
        self, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]
    ) -> list[uuid.UUID]:
        """Remove the links between the documents and the tags.

        Returns the document of each removed link. Use :func:`dms.services.untag_documents`,
        which also bumps the documents' versions.
        """
        documents = check_ids("document", document_ids)
        tags = check_ids("tag", tag_ids)
        with translated(self._conn, f"links of tags {tags} to documents {documents}"):
            unlinked = self._execute(
                sa.delete(_links)
                .where(_links.c.document_id.in_(documents), _links.c.tag_id.in_(tags))
                .returning(_links.c.document_id)
            ).scalars()
            return list(unlinked)

    def tags_of(self, document_id: uuid.UUID) -> list[Tag]:
        """Return the document's tags, ordered by name."""
        check_id("document", document_id)
        rows = self._execute(
            sa.select(*COLUMNS)
            .join(_links, _links.c.tag_id == _t.c.id)
            .where(_links.c.document_id == document_id)
            .order_by(sa.func.lower(_t.c.name), _t.c.id)
        )
        return [tag(row) for row in rows]

    def _one(self, condition: sa.ColumnElement[bool], missing: str) -> Tag:
        row = self._execute(sa.select(*COLUMNS).where(condition)).one_or_none()
        if row is None:
            raise NotFound(missing)
        return tag(row)
