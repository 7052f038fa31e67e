"""Every SQL expression on ``documents``.

Create, read, update with optimistic concurrency, soft delete, restore, purge, and search with
keyset pagination. A search's conditions on other tables (a folder's subtree, tags, metadata
values) come from the modules that own those tables; their fields come from the caller
(:func:`dms.services.search_documents` reads them), so building a search reads nothing.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.engine import Row
from sqlalchemy.sql.dml import Insert

from dms.domain import Cursor, Document, DocumentQuery, MetadataField, NewDocument, Page
from dms.domain.search import check_cursor, check_page_size, check_query
from dms.domain.text_query import parse_text_query
from dms.domain.validation import (
    TITLE_MAX_CHARS,
    check_flag,
    check_id,
    check_ids,
    check_name,
    check_optional_id,
    check_timestamp,
    check_version,
    shown,
)
from dms.errors import ConcurrentUpdate, InvariantViolation, NotFound, ValidationError
from dms.schema import tenant as t
from dms.schema.recordsets import recordset

from . import _recordset, _rows, folders, metadata, search, tags
from ._base import Repository
from ._lock import LockTable
from .errors import translated

#: Most matches of a content search that are ranked: a word in a tenth of a million documents
#: would otherwise cost a rank computation each (hundreds of milliseconds) for a page of 20.
#: Beyond it, the search ranks the first matches the index yields, and says that its total is
#: not exact. docs/search.md says what that means and bench/results/search.md what it saves.
RANK_CANDIDATES = 2000

#: The documents' key to their current revision (composite: only one of the document's own),
#: declared ``DEFERRABLE INITIALLY IMMEDIATE``; only an import's batch defers it
#: (:func:`check_current_revisions`).
CURRENT_REVISION_KEY = "fk_documents_current_revision"

_d = t.documents
_TITLE_KEY = sa.func.lower(_d.c.title)
_LIKE_ESCAPE = "\\"
_ID_ARRAY = ARRAY(sa.Uuid)
COLUMNS = tuple(_d.c)
#: A document by id, built once: building a select of every column per call (each column
#: coerced, the statement's cache key computed again) cost more than the server's answer.
_BY_ID = sa.select(*COLUMNS).where(_d.c.id == sa.bindparam("document_id"))
_LIVE_BY_ID = _BY_ID.where(_d.c.deleted_at.is_(None))


def document(row: Row[Any]) -> Document:
    """Return the document in ``row``."""
    return _rows.build(Document, row)


def live_id(document_id: uuid.UUID) -> sa.Select[tuple[uuid.UUID]]:
    """Return: the id of ``document_id`` if it is a live (not deleted) document."""
    return sa.select(_d.c.id).where(_d.c.id == document_id, _d.c.deleted_at.is_(None))


def any_id(document_id: uuid.UUID) -> sa.Select[tuple[uuid.UUID]]:
    """Return: the id of ``document_id`` if it is a document, live or deleted.

    As every read, only one the acting user may view (row-level security, docs/access.md).
    """
    return sa.select(_d.c.id).where(_d.c.id == document_id)


def is_live(document_id: sa.ColumnElement[uuid.UUID]) -> sa.ColumnElement[bool]:
    """Return: ``document_id`` is the id of a live document."""
    return document_id.in_(sa.select(_d.c.id).where(_d.c.deleted_at.is_(None)))


def live_ids(document_ids: Sequence[uuid.UUID]) -> sa.Select[tuple[uuid.UUID]]:
    """Return: the ids of the live (not deleted) ones of ``document_ids``."""
    return sa.select(_d.c.id).where(
        _recordset.any_of(_d.c.id, document_ids), _d.c.deleted_at.is_(None)
    )


def is_trashed(document_id: sa.ColumnElement[uuid.UUID]) -> sa.ColumnElement[bool]:
    """Return: ``document_id`` is the id of a document in the trash."""
    return document_id.in_(sa.select(_d.c.id).where(_d.c.deleted_at.is_not(None)))


def is_current_revision(revision_id: sa.ColumnElement[uuid.UUID]) -> sa.ColumnElement[bool]:
    """Return: ``revision_id`` is the current revision of its document."""
    return sa.exists().where(_d.c.current_revision_id == revision_id)


def current_revision_of(document_id: uuid.UUID) -> sa.ScalarSelect[Any]:
    """Return: the id of the current revision of ``document_id`` (NULL for none)."""
    return sa.select(_d.c.current_revision_id).where(_d.c.id == document_id).scalar_subquery()


class DocumentRepository(Repository):
    """Documents of one tenant."""

    def add(self, *, title: str, folder_id: uuid.UUID | None = None) -> Document:
        """Create a document in ``folder_id`` (top level if ``None``); no revision yet."""
        check_name("document", title, max_chars=TITLE_MAX_CHARS)
        check_optional_id("folder", folder_id)
        author = self._actor()  # before any SQL, as the checks above
        self._lock_live_folder(folder_id)
        with translated(self._conn, f"document {title!r} in folder {folder_id}", user=author):
            row = self._execute(
                sa.insert(_d)
                .values(title=title, folder_id=folder_id, created_by=author)
                .returning(*COLUMNS)
            ).one()
        return document(row)

    def get(self, document_id: uuid.UUID, *, include_deleted: bool = False) -> Document:
        """Return the document, or raise :class:`NotFound` (also for a deleted one by default)."""
        check_id("document", document_id)
        check_flag("include_deleted", include_deleted)
        query = _BY_ID if include_deleted else _LIVE_BY_ID
        row = self._execute(query, {"document_id": document_id}).one_or_none()
        if row is None:
            raise NotFound(f"document {document_id} does not exist")
        return document(row)

    def rename(self, document_id: uuid.UUID, *, title: str, version: int) -> Document:
        """Give the document a new title; ``version`` is the one the caller read."""
        check_id("document", document_id)
        check_name("document", title, max_chars=TITLE_MAX_CHARS)
        check_version(version)
        return self._update(document_id, version, f"title {title!r}", title=title)

    def move(
        self, document_id: uuid.UUID, *, folder_id: uuid.UUID | None, version: int
    ) -> Document:
        """Move the document into ``folder_id`` (top level if ``None``)."""
        check_id("document", document_id)
        check_optional_id("folder", folder_id)
        check_version(version)
        self._lock_live_folder(folder_id)
        return self._update(document_id, version, f"folder {folder_id}", folder_id=folder_id)

    def soft_delete(self, document_id: uuid.UUID, *, version: int) -> Document:
        """Put the document in the trash; :meth:`restore` takes it out."""
        check_id("document", document_id)
        check_version(version)
        # Read first, not in the UPDATE: Citus refuses VOLATILE functions in an UPDATE.
        stamp = self._execute(sa.select(sa.func.clock_timestamp())).scalar_one()
        return self._update(document_id, version, "deletion", deleted_at=stamp)

    def restore(self, document_id: uuid.UUID, *, version: int) -> Document:
        """Take the document out of the trash.

        Raises :class:`AlreadyExists` if a live document in its folder took its title meanwhile,
        :class:`InvariantViolation` if its folder is in the trash.
        """
        check_version(version)
        current = self.get(document_id, include_deleted=True)
        if current.deleted_at is None:
            raise InvariantViolation(f"document {document_id} is not deleted")
        self._require_live_folder(current.folder_id, f"document {current.title!r}")
        what = f"document {current.title!r} in folder {current.folder_id}"
        return self._update(document_id, version, what, deleted=True, deleted_at=sa.null())

    def purge(self, document_id: uuid.UUID) -> None:
        """Delete the document for good, with its revisions, tag links and metadata values."""
        check_id("document", document_id)
        with translated(self._conn, f"document {document_id}"):
            deleted = self._execute(
                sa.delete(_d).where(_d.c.id == document_id).returning(_d.c.id)
            ).one_or_none()
        if deleted is None:
            raise NotFound(f"document {document_id} does not exist")

    def trash(
        self,
        *,
        limit: int = 50,
        after: Document | None = None,
        deleted_before: datetime | None = None,
    ) -> list[Document]:
        """The documents in the trash, most recently deleted first, at most ``limit``.

        ``after``: the last document of the previous page (its deletion time and id are the
        keyset). ``deleted_before``: only documents deleted before that time.
        """
        check_page_size(limit)
        found: list[sa.ColumnElement[bool]] = [_d.c.deleted_at.is_not(None)]
        if after is not None:
            if not isinstance(after, Document) or after.deleted_at is None:
                raise ValidationError(f"after must be a document in the trash, not {shown(after)}")
            found.append(sa.tuple_(_d.c.deleted_at, _d.c.id) < (after.deleted_at, after.id))
        if deleted_before is not None:
            found.append(_d.c.deleted_at < check_timestamp("deleted_before", deleted_before))
        rows = self._execute(
            sa.select(*COLUMNS)
            .where(*found)
            .order_by(_d.c.deleted_at.desc(), _d.c.id.desc())
            .limit(limit)
        )
        return [document(row) for row in rows]

    def set_current_revision(self, document_id: uuid.UUID, revision_id: uuid.UUID) -> Document:
        """Point the document at ``revision_id`` (one of its own) and bump its version.

        Takes no expected version: uploads never conflict with each other, they queue.
        """
        check_id("document", document_id)
        check_id("revision", revision_id)
        with translated(self._conn, f"revision {revision_id} of document {document_id}"):
            row = self._execute(
                sa.update(_d)
                .where(_d.c.id == document_id)
                .values(
                    current_revision_id=revision_id,
                    version=_d.c.version + 1,
                    updated_at=sa.func.now(),
                )
                .returning(*COLUMNS)
            ).one_or_none()
        if row is None:
            raise NotFound(f"document {document_id} does not exist")
        return document(row)

    def soft_delete_in_folders(self, folder_ids: Sequence[uuid.UUID], at: datetime) -> int:
        """Put the live documents of ``folder_ids`` in the trash at ``at``; return how many."""
        ids = check_ids("folder", folder_ids)
        check_timestamp("deletion time", at)
        result = self._execute(
            sa.update(_d)
            .where(_d.c.folder_id.in_(ids), _d.c.deleted_at.is_(None))
            .values(deleted_at=at, version=_d.c.version + 1, updated_at=sa.func.now())
        )
        return result.rowcount

    def restore_in_folders(self, folder_ids: Sequence[uuid.UUID], deleted_at: datetime) -> int:
        """Restore the documents of ``folder_ids`` trashed at ``deleted_at``; return how many."""
        ids = check_ids("folder", folder_ids)
        check_timestamp("deletion time", deleted_at)
        with translated(self._conn, f"documents of folders {ids}"):
            result = self._execute(
                sa.update(_d)
                .where(_d.c.folder_id.in_(ids), _d.c.deleted_at == deleted_at)
                .values(deleted_at=None, version=_d.c.version + 1, updated_at=sa.func.now())
            )
        return result.rowcount

    def record_change(self, document_ids: Iterable[uuid.UUID]) -> None:
        """Bump the version of documents whose tags or metadata values just changed.

        Tags and values are part of what a reader of a document saw: after a change to them, an
        update carrying the version read before fails with :class:`ConcurrentUpdate`. The
        changes themselves take no expected version (bulk tagging spans many documents, and
        setting a value is idempotent), so they never fail on a stale read; they only make
        other writers' reads stale. Ids that are not documents of the tenant are ignored.
        The use cases of :mod:`dms.services` that change tags and values call this.
        """
        ids = sorted(set(check_ids("document", document_ids)))
        if not ids:
            return
        # Sorted ids and one statement: concurrent bulk changes lock rows in the same order.
        self._execute(
            sa.update(_d)
            .where(_d.c.id.in_(ids))
            .values(version=_d.c.version + 1, updated_at=sa.func.now())
        )

    def hold_off_writes(self) -> None:
        """Make every other transaction's insert, update or delete of documents wait for ours.

        For changes that must see every document, including one being created concurrently:
        a required metadata field's backfill. Reads go on. SHARE ROW EXCLUSIVE rather than
        SHARE because it conflicts with itself: two holders can never both wait to write.
        """
        self._execute(LockTable(_d, "SHARE ROW EXCLUSIVE"))

    def any_exist(self) -> bool:
        """Return whether the tenant has a document at all (deleted ones included)."""
        return bool(self._execute(sa.select(sa.exists().where(_d.c.id.is_not(None)))).scalar())

    def with_all_tags(self, tag_ids: Iterable[uuid.UUID]) -> list[Document]:
        """Return the live documents that have every one of ``tag_ids``, by title."""
        return self._listed(tags.has_all(_d.c.id, check_ids("tag", tag_ids)))

    def with_any_tag(self, tag_ids: Iterable[uuid.UUID]) -> list[Document]:
        """Return the live documents that have at least one of ``tag_ids``, by title."""
        return self._listed(tags.has_any(_d.c.id, check_ids("tag", tag_ids)))

    def search(
        self,
        query: DocumentQuery,
        *,
        fields: Mapping[uuid.UUID, MetadataField] | None = None,
        limit: int = 50,
        after: Cursor | None = None,
    ) -> Page[Document]:
        """Return one page of live documents matching ``query``, ordered by title then id.

        With ``query.text``, ordered by relevance (highest first) then id instead, with the
        number of matches (``estimated_total``: exact below :data:`RANK_CANDIDATES` matching
        index rows, else a lower bound, ``total_exact``). ``fields``
        are the fields of ``query``'s metadata filters, by id:
        :func:`dms.services.search_documents` reads them and calls this. Pass the page's
        ``next_cursor`` as ``after`` for the next page; the cost of a page does not grow with
        its position (keyset, not OFFSET).
        """
        statement = self.search_statement(query, fields=fields, limit=limit, after=after)
        page = _page(list(self._execute(statement)), limit)
        if query.text is not None and not page.items:
            # Nothing matched (first page), or nothing is left (a later one): no total then.
            first = after is None
            return Page(items=[], next_cursor=None, estimated_total=0 if first else None)
        return page

    def search_statement(
        self,
        query: DocumentQuery,
        *,
        fields: Mapping[uuid.UUID, MetadataField] | None = None,
        limit: int = 50,
        after: Cursor | None = None,
    ) -> sa.Select[Any]:
        """Return the statement behind :meth:`search` (one row more than ``limit``).

        For ``EXPLAIN`` and benchmarks; applications call :func:`dms.services.search_documents`.
        """
        check_query(query)
        check_page_size(limit)
        check_cursor(after)
        if query.text is not None:
            return self._text_search_statement(query, fields or {}, limit=limit, after=after)
        if after is not None and after.rank is not None:
            raise ValidationError("this cursor belongs to a content search (text=...)")
        statement = (
            sa.select(*COLUMNS, _TITLE_KEY.label("title_key"))
            .where(
                _d.c.deleted_at.is_(None),
                *_conditions(self._tenant, query, {} if fields is None else fields),
            )
            .order_by(_TITLE_KEY, _d.c.id)
            .limit(limit + 1)
        )
        if after is not None:
            # The redundant first bound is what seeks: it is an index condition on
            # uq_documents_folder_title (folder_id, lower(title)); the row comparison then
            # filters at most the one row with an equal title. There is deliberately no index
            # on (lower(title), id): given one, the planner may walk the whole title order
            # filtering by folder, and page 500 of a 10,000-document folder whose titles are
            # clustered read 2,301 buffers (12.7 ms) instead of 4 (0.05 ms) in bench/.
            statement = statement.where(
                sa.func.lower(_d.c.title) >= after.title_key,
                sa.tuple_(_TITLE_KEY, _d.c.id) > (after.title_key, after.id),
            )
        return statement

    def _text_search_statement(
        self,
        query: DocumentQuery,
        fields: Mapping[uuid.UUID, MetadataField],
        *,
        limit: int,
        after: Cursor | None,
    ) -> sa.Select[Any]:
        ranked = search.best_per_document(
            self._candidates(query, fields).limit(RANK_CANDIDATES).subquery("candidates")
        ).subquery("ranked")
        top = sa.select(ranked).order_by(ranked.c.rank.desc(), ranked.c.document_id)
        # The totals were counted over every match (in ranked) before the keyset cut.
        if after is not None:
            if after.rank is None:
                raise ValidationError("this cursor belongs to a search without text")
            rank, id_ = ranked.c.rank, ranked.c.document_id
            top = top.where(sa.or_(rank < after.rank, sa.and_(rank == after.rank, id_ > after.id)))
        page = top.limit(limit + 1).subquery("page")
        # Only the page's documents are read whole.
        return (
            sa.select(*COLUMNS, page.c.rank, page.c.matched, page.c.parts)
            .join_from(page, _d, _d.c.id == page.c.document_id)
            .order_by(page.c.rank.desc(), _d.c.id)
        )

    def _candidates(
        self, query: DocumentQuery, fields: Mapping[uuid.UUID, MetadataField]
    ) -> sa.Select[Any]:
        """The index rows of live documents that ``query`` matches, each with its rank."""
        assert query.text is not None  # noqa: S101 (the callers' condition)
        conditions = _conditions(self._tenant, query, fields)
        parts = search.matching_parts(
            self._tenant,
            parse_text_query(query.text),
            within_all=query.tags_all | _folder_ids(query),
            within_any=query.tags_any,
            # With no condition left to apply here, the first candidates found are the first
            # that pass: the index stops there instead of handing over every match.
            max_rows=None if conditions else RANK_CANDIDATES,
        )
        document_id = parts.selected_columns.document_id
        return parts.join(_d, _d.c.id == document_id).where(_d.c.deleted_at.is_(None), *conditions)

    def _listed(self, condition: sa.ColumnElement[bool]) -> list[Document]:
        rows = self._execute(
            sa.select(*COLUMNS)
            .where(_d.c.deleted_at.is_(None), condition)
            .order_by(_TITLE_KEY, _d.c.id)
        )
        return [document(row) for row in rows]

    def _update(
        self,
        document_id: uuid.UUID,
        version: int,
        what: str,
        *,
        deleted: bool = False,
        **values: Any,
    ) -> Document:
        state = _d.c.deleted_at.is_not(None) if deleted else _d.c.deleted_at.is_(None)
        statement = (
            sa.update(_d)
            .where(_d.c.id == document_id, _d.c.version == version, state)
            .values(version=_d.c.version + 1, updated_at=sa.func.now(), **values)
            .returning(*COLUMNS)
        )
        with translated(self._conn, f"document {document_id} with {what}"):
            row = self._execute(statement).one_or_none()
        if row is None:
            raise self._why_unchanged(document_id, version)
        return document(row)

    def _why_unchanged(self, document_id: uuid.UUID, version: int) -> Exception:
        current = self._execute(
            sa.select(_d.c.version, _d.c.deleted_at).where(_d.c.id == document_id)
        ).one_or_none()
        if current is None:
            return NotFound(f"document {document_id} does not exist")
        if current.version != version:
            return ConcurrentUpdate(
                f"document {document_id} is at version {current.version}, not {version}: "
                "reload it and try again"
            )
        return NotFound(f"document {document_id} is deleted")

    def add_many(self, documents: Sequence[NewDocument]) -> list[uuid.UUID | None]:
        """Create many documents in one statement; return their ids, one per input, in order.

        Made for imports: only ids come back, no rows to decode. A result is ``None`` where a
        live document of the folder already has the title (ignoring case), or an earlier one of
        the same call took it: nothing is created for it and the others go on. Every folder must
        be live, else :class:`NotFound` and nothing is created. No revision, tags or metadata
        values: :func:`dms.services.create_document` does those for one document. No
        savepoint: if the database refuses the statement, roll the unit of work back.
        """
        for document in documents:
            check_name("document", document.title, max_chars=TITLE_MAX_CHARS)
        if not documents:
            return []
        in_folders = {d.folder_id for d in documents}
        rows = [{"title": d.title, "folder_id": d.folder_id} for d in documents]
        author = self._actor()
        with translated(self._conn, f"{len(documents)} documents", savepoint=False, user=author):
            created = self._execute(
                _add_many_statement(),
                {
                    "documents": _recordset.encode(rows),
                    "created_by": author,
                    **folders.folder_parameters(in_folders),
                },
            )
            by_key = {(row.folder_id, row.title): row.id for row in created}
        if not by_key:
            # Every title was taken, or a folder is missing (then nothing was inserted at all).
            self._lock_live_folders(in_folders)
        return [by_key.pop((d.folder_id, d.title), None) for d in documents]

    def set_current_revisions(self, current: Mapping[uuid.UUID, uuid.UUID]) -> None:
        """Point each document (key) at its revision (value), in one statement.

        As :meth:`set_current_revision` for many documents: each revision must be one of its
        document's own, and each document's version goes up by one.
        """
        if not current:
            return
        rows = [{"document_id": d, "revision_id": r} for d, r in sorted(current.items())]
        with translated(self._conn, f"current revisions of {len(rows)} documents", savepoint=False):
            updated = self._execute(
                _set_current_statement(), {"current": _recordset.encode(rows)}
            ).rowcount
        if updated != len(rows):
            raise NotFound(f"{len(rows) - updated} of {len(rows)} documents do not exist")

    def current_revisions(self) -> sa.Select[tuple[uuid.UUID]]:
        """The ids of every document's current revision (trash included), as a statement."""
        return sa.select(_d.c.current_revision_id).where(_d.c.current_revision_id.is_not(None))

    def titles_in(self, folder_id: uuid.UUID | None) -> list[str]:
        """The titles of the live documents directly in ``folder_id`` (top level if ``None``)."""
        folder = _d.c.folder_id.is_(None) if folder_id is None else _d.c.folder_id == folder_id
        query = sa.select(_d.c.title).where(folder, _d.c.deleted_at.is_(None))
        return list(self._execute(query).scalars())

    def _lock_live_folders(self, folder_ids: set[uuid.UUID | None]) -> None:
        # As _lock_live_folder, for many at once (see folders.lock_live_many).
        wanted = sorted(i for i in folder_ids if i is not None)
        if not wanted:
            return
        found = self._execute(folders.lock_live_many(wanted)).scalars().all()
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise NotFound(f"folder {missing[0]} does not exist")

    def _lock_live_folder(self, folder_id: uuid.UUID | None) -> None:
        # A document never lands in a folder that is going to the trash (see folders.lock_live).
        if folder_id is None:
            return
        if self._execute(folders.lock_live(folder_id)).one_or_none() is None:
            raise NotFound(f"folder {folder_id} does not exist")

    def _require_live_folder(self, folder_id: uuid.UUID | None, what: str) -> None:
        try:
            self._lock_live_folder(folder_id)
        except NotFound:
            raise InvariantViolation(
                f"{what} is in folder {folder_id}, which is deleted: restore the folder first"
            ) from None


def _conditions(
    tenant: str, query: DocumentQuery, fields: Mapping[uuid.UUID, MetadataField]
) -> list[sa.ColumnElement[bool]]:
    """Return the conditions on ``documents`` that ``query`` asks for (AND-ed by the caller)."""
    found: list[sa.ColumnElement[bool]] = []
    if query.folder_id is not None:
        found.append(_in_folder(query.folder_id, subfolders=query.include_subfolders))
    if query.tags_all:
        found.append(tags.has_all(_d.c.id, query.tags_all))
    if query.tags_any:
        found.append(tags.has_any(_d.c.id, query.tags_any))
    if query.title_contains is not None:
        found.append(_title_contains(tenant, query.title_contains))
    for wanted in query.metadata:
        found.append(metadata.value_matches(_d.c.id, _field_of(wanted.field_id, fields), wanted))
    return found


def _field_of(field_id: uuid.UUID, fields: object) -> MetadataField:
    field = fields.get(field_id) if isinstance(fields, Mapping) else None
    if not isinstance(field, MetadataField) or field.id != field_id:
        raise ValidationError(
            f"the metadata filter on field {field_id} needs that field: pass it in fields "
            "(dms.services.search_documents does)"
        )
    return field


def _in_folder(folder_id: uuid.UUID, *, subfolders: bool) -> sa.ColumnElement[bool]:
    if not subfolders:
        return _d.c.folder_id == folder_id
    tree = folders.subtree_ids(folder_id)
    # As an array, not a semi-join: PostgreSQL guesses a recursive CTE a hundred times too
    # large (9,901 folders for a subtree of 99), and would then read every document to hash
    # join them, which under row-level security (its title keyset not an index condition
    # there) is what it did. An array is guessed small, so the folders' documents are read by
    # folder_id from uq_documents_folder_title.
    subtree = sa.func.array(sa.select(tree.c.id).scalar_subquery(), type_=_ID_ARRAY)
    return _d.c.folder_id == sa.any_(subtree)


def _folder_ids(query: DocumentQuery) -> frozenset[uuid.UUID]:
    # Directly in the folder is under it too: the index narrows to the subtree either way.
    return frozenset() if query.folder_id is None else frozenset({query.folder_id})


def _title_contains(tenant: str, text: str) -> sa.ColumnElement[bool]:
    # Ignoring case; % and _ match themselves. Through the search's function, not an ILIKE
    # here: under row-level security that would be evaluated after the policy, row by row,
    # never by the trigram index (migration 0017).
    escaped = "".join(_LIKE_ESCAPE + char if char in "%_\\" else char for char in text)
    return _d.c.id.in_(search.titled_like(tenant, f"%{escaped}%"))


def _page(rows: list[Any], limit: int) -> Page[Document]:
    items = [document(row) for row in rows[:limit]]
    if rows and "rank" in rows[0]._fields:
        return _ranked_page(rows, items, limit)
    if len(rows) <= limit:
        return Page(items=items, next_cursor=None)
    last = rows[limit - 1]
    return Page(items=items, next_cursor=Cursor(title_key=last.title_key, id=last.id))


def _ranked_page(rows: list[Any], items: list[Document], limit: int) -> Page[Document]:
    last = rows[limit - 1] if len(rows) > limit else None
    return Page(
        items=items,
        next_cursor=None if last is None else Cursor(title_key="", id=last.id, rank=last.rank),
        estimated_total=int(rows[0].matched),
        total_exact=int(rows[0].parts) < RANK_CANDIDATES,
    )


def insert_new(columns: Sequence[str], rows: sa.Select[Any]) -> Insert:
    """Return: insert ``rows`` (values of ``columns``) as live documents, none with a taken title.

    A row whose title a live document of its folder has (ignoring case), or an earlier row
    of the same statement took, is skipped (``ON CONFLICT DO NOTHING``). For bulk inserts: it
    returns the ``id``, ``folder_id``, ``title`` and ``current_revision_id`` of the rows that
    went in.
    """
    return (
        insert(_d)
        .from_select(list(columns), rows)
        .on_conflict_do_nothing(
            index_elements=[_d.c.folder_id, sa.func.lower(_d.c.title)],
            index_where=_d.c.deleted_at.is_(None),
        )
        .returning(_d.c.id, _d.c.folder_id, _d.c.title, _d.c.current_revision_id)
    )


@functools.cache
def _add_many_statement() -> sa.Executable:
    batch = recordset("documents", [("title", sa.Text()), ("folder_id", sa.Uuid())])
    rows = sa.select(
        batch.c.title, batch.c.folder_id, sa.bindparam("created_by", type_=sa.Uuid())
    ).where(folders.all_live_locked())
    return insert_new(["title", "folder_id", "created_by"], rows)


@functools.cache
def _set_current_statement() -> sa.Executable:
    batch = recordset("current", [("document_id", sa.Uuid()), ("revision_id", sa.Uuid())])
    return (
        sa.update(_d)
        .where(_d.c.id == batch.c.document_id)
        .values(
            current_revision_id=batch.c.revision_id,
            version=_d.c.version + 1,
            updated_at=sa.func.now(),
        )
    )


def check_current_revisions(schema: str, *, deferred: bool) -> sql.Composed:
    """Return: check :data:`CURRENT_REVISION_KEY` of ``schema``'s documents at commit, or now.

    ``SET CONSTRAINTS``, which Core cannot express, for the rest of the transaction:
    ``deferred``, the rows that statements insert or change are checked at commit; else they
    are checked at each statement's end again, as without it, and those changed while the
    key was deferred are checked at once (a violation is raised by this command). The schema
    is named: routing (``schema_translate_map``) does not reach this command. Only on plain
    PostgreSQL: Citus does not pass it on to the node that holds the tenant.
    """
    return sql.SQL("SET CONSTRAINTS {}.{} {}").format(
        sql.Identifier(schema),
        sql.Identifier(CURRENT_REVISION_KEY),
        sql.SQL("DEFERRED" if deferred else "IMMEDIATE"),
    )
