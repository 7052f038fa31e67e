"""Every SQL statement on ``tags`` and ``document_tags``."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from dms.domain import Document, Tag
from dms.domain.validation import check_name
from dms.errors import NotFound
from dms.schema import tenant as t

from . import _rows, _search
from ._base import Repository
from .documents import DocumentRepository
from .errors import translated

NAME_MAX_CHARS = 100

_t = t.tags
_links = t.document_tags
_d = t.documents


class TagRepository(Repository):
    """Tags of one tenant and their links to documents."""

    def add(self, *, name: str) -> Tag:
        """Create a tag; raises :class:`AlreadyExists` if one has the name, ignoring case."""
        check_name("tag", name, max_chars=NAME_MAX_CHARS)
        with translated(self._conn, f"tag {name!r}"):
            row = self._conn.execute(
                sa.insert(_t)
                .values(name=name, created_by=self._actor())
                .returning(*_rows.TAG_COLUMNS)
            ).one()
        return _rows.tag(row)

    def get(self, tag_id: uuid.UUID) -> Tag:
        """Return the tag, or raise :class:`NotFound`."""
        return self._one(_t.c.id == tag_id, f"tag {tag_id} does not exist")

    def get_by_name(self, name: str) -> Tag:
        """Return the tag called ``name`` (ignoring case), or raise :class:`NotFound`."""
        condition = sa.func.lower(_t.c.name) == sa.func.lower(name)
        return self._one(condition, f"tag {name!r} does not exist")

    def all(self) -> list[Tag]:
        """Return every tag, ordered by name."""
        rows = self._conn.execute(
            sa.select(*_rows.TAG_COLUMNS).order_by(sa.func.lower(_t.c.name), _t.c.id)
        )
        return [_rows.tag(row) for row in rows]

    def rename(self, tag_id: uuid.UUID, *, name: str) -> Tag:
        """Rename a tag; links stay."""
        check_name("tag", name, max_chars=NAME_MAX_CHARS)
        with translated(self._conn, f"tag {name!r}"):
            row = self._conn.execute(
                sa.update(_t)
                .where(_t.c.id == tag_id)
                .values(name=name, updated_at=sa.func.now())
                .returning(*_rows.TAG_COLUMNS)
            ).one_or_none()
        if row is None:
            raise NotFound(f"tag {tag_id} does not exist")
        return _rows.tag(row)

    def delete(self, tag_id: uuid.UUID) -> None:
        """Delete a tag and its links to documents."""
        deleted = self._conn.execute(
            sa.delete(_t).where(_t.c.id == tag_id).returning(_t.c.id)
        ).one_or_none()
        if deleted is None:
            raise NotFound(f"tag {tag_id} does not exist")

    def tag(self, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]) -> int:
        """Link every document to every tag in one statement; return how many links are new.

        Bumps the version of each document that gained a tag, so that an update based on an
        earlier read raises :class:`~dms.errors.ConcurrentUpdate`; tagging itself takes no
        expected version (see :meth:`.DocumentRepository.record_change`).
        """
        rows = [
            {"document_id": document_id, "tag_id": tag_id}
            for document_id in set(document_ids)
            for tag_id in set(tag_ids)
        ]
        if not rows:
            return 0
        what = f"links of documents {sorted({r['document_id'] for r in rows})}"
        with translated(self._conn, what):
            linked = self._conn.execute(
                insert(_links).values(rows).on_conflict_do_nothing().returning(_links.c.document_id)
            ).scalars()
            changed = list(linked)
            self._documents_repository().record_change(changed)
        return len(changed)

    def untag(self, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]) -> int:
        """Remove the links between the documents and the tags; return how many went.

        Bumps the version of each document that lost a tag (see :meth:`tag`).
        """
        unlinked = self._conn.execute(
            sa.delete(_links)
            .where(_links.c.document_id.in_(list(document_ids)), _links.c.tag_id.in_(list(tag_ids)))
            .returning(_links.c.document_id)
        ).scalars()
        changed = list(unlinked)
        self._documents_repository().record_change(changed)
        return len(changed)

    def tags_of(self, document_id: uuid.UUID) -> list[Tag]:
        """Return the document's tags, ordered by name."""
        rows = self._conn.execute(
            sa.select(*_rows.TAG_COLUMNS)
            .join(_links, _links.c.tag_id == _t.c.id)
            .where(_links.c.document_id == document_id)
            .order_by(sa.func.lower(_t.c.name), _t.c.id)
        )
        return [_rows.tag(row) for row in rows]

    def documents_with_all(self, tag_ids: Iterable[uuid.UUID]) -> list[Document]:
        """Return the live documents that have every one of ``tag_ids``, by title."""
        return self._documents([_search.has_all_tags(tag_ids)])

    def documents_with_any(self, tag_ids: Iterable[uuid.UUID]) -> list[Document]:
        """Return the live documents that have at least one of ``tag_ids``, by title."""
        return self._documents([_search.has_tags(tag_ids)])

    def _documents(self, conditions: list[sa.ColumnElement[bool]]) -> list[Document]:
        rows = self._conn.execute(
            sa.select(*_rows.DOCUMENT_COLUMNS)
            .where(_d.c.deleted_at.is_(None), *conditions)
            .order_by(sa.func.lower(_d.c.title), _d.c.id)
        )
        return [_rows.document(row) for row in rows]

    def _documents_repository(self) -> DocumentRepository:
        return DocumentRepository(self._conn, user_id=self._user_id)

    def _one(self, condition: sa.ColumnElement[bool], missing: str) -> Tag:
        row = self._conn.execute(sa.select(*_rows.TAG_COLUMNS).where(condition)).one_or_none()
        if row is None:
            raise NotFound(missing)
        return _rows.tag(row)
