"""Every SQL expression on ``file_revisions``.

The database numbers revisions (trigger ``file_revisions_guard``): it locks the document row,
so two uploads to one document in separate transactions get 1 and 2, never a duplicate or a
gap. Revisions are append-only; they go only with their document. Conditions on the document
(live, its current revision) come from :mod:`.documents`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from dms.domain import NewRevision, Revision
from dms.domain.validation import (
    check_id,
    check_ids,
    check_revision,
    check_sha256,
    normalize_mime_type,
)
from dms.errors import NotFound, ValidationError
from dms.schema import tenant as t
from dms.schema.recordsets import recordset

from . import _recordset, _rows, documents
from ._base import Repository
from .errors import translated

_r = t.file_revisions
COLUMNS = tuple(_r.c)
#: A revision by id, and a document's revisions in order, built once (as documents'
#: ``_BY_ID``: a select built per call cost more than the server's answer).
_BY_ID = sa.select(*COLUMNS).where(_r.c.id == sa.bindparam("revision_id"))
_HISTORY = (
    sa.select(*COLUMNS)
    .where(_r.c.document_id == sa.bindparam("document_id"))
    .order_by(_r.c.revision_no)
)


def revision(row: Row[Any]) -> Revision:
    """Return the revision in ``row``."""
    return _rows.build(Revision, row)


def references(storage_key: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """Return: some revision's ``storage_key`` is ``storage_key`` (a blob is still in use)."""
    return sa.exists().where(_r.c.storage_key == storage_key)


class RevisionRepository(Repository):
    """File revisions of one tenant's documents."""

    def add(
        self,
        document_id: uuid.UUID,
        *,
        storage_key: str,
        sha256: str,
        size_bytes: int,
        mime_type: str,
    ) -> Revision:
        """Append the next revision of a live document and return it (numbered by the database).

        This does not move the document's current revision: see
        :func:`dms.services.add_revision`, which does both. ``mime_type`` is stored normalised
        (``text/SGML`` as ``text/sgml``).
        """
        check_id("document", document_id)
        mime_type = normalize_mime_type(mime_type)
        check_revision(
            storage_key=storage_key, sha256=sha256, size_bytes=size_bytes, mime_type=mime_type
        )
        uploader = self._actor()  # before any SQL, as the checks above
        self._require_live_document(document_id)
        with translated(self._conn, f"revision of document {document_id}", user=uploader):
            row = self._execute(
                sa.insert(_r)
                .values(
                    document_id=document_id,
                    storage_key=storage_key,
                    sha256=sha256,
                    size_bytes=size_bytes,
                    mime_type=mime_type,
                    uploaded_by=uploader,
                )
                .returning(*COLUMNS)
            ).one()
        return revision(row)

    def get(self, revision_id: uuid.UUID) -> Revision:
        """Return the revision, or raise :class:`NotFound`."""
        check_id("revision", revision_id)
        row = self._execute(_BY_ID, {"revision_id": revision_id}).one_or_none()
        if row is None:
            raise NotFound(f"revision {revision_id} does not exist")
        return revision(row)

    def current_among(self, revision_ids: Sequence[uuid.UUID]) -> list[Revision]:
        """The revisions of ``revision_ids`` that are their documents' current ones, by id.

        The others (superseded, purged, or never there) are left out.
        """
        ids = check_ids("revision", revision_ids)
        if not ids:
            return []
        rows = self._execute(
            sa.select(*COLUMNS)
            .where(_recordset.any_of(_r.c.id, ids), documents.is_current_revision(_r.c.id))
            .order_by(_r.c.id)
        )
        return [revision(row) for row in rows]

    def history(self, document_id: uuid.UUID) -> list[Revision]:
        """Return the document's revisions, oldest (number 1) first."""
        check_id("document", document_id)
        rows = self._execute(_HISTORY, {"document_id": document_id})
        return [revision(row) for row in rows]

    def current(self, document_id: uuid.UUID) -> Revision | None:
        """Return the document's current revision (``None`` before the first upload).

        Raises :class:`NotFound` for a document that does not exist or that the acting user
        may not view, as every read does (docs/access.md): ``None`` would say that it exists.
        """
        check_id("document", document_id)
        row = self._execute(
            sa.select(*COLUMNS).where(_r.c.id == documents.current_revision_of(document_id))
        ).one_or_none()
        if row is not None:
            return revision(row)
        # Rarely here (before a first upload): a second query only then tells the two apart.
        if self._execute(documents.any_id(document_id)).one_or_none() is None:
            raise NotFound(f"document {document_id} does not exist")
        return None

    def find_by_sha256(self, sha256: str) -> list[Revision]:
        """Return the revisions of live documents with this content hash (duplicate warning)."""
        digest = check_sha256(sha256)
        rows = self._execute(
            sa.select(*COLUMNS)
            .where(_r.c.sha256 == digest, documents.is_live(_r.c.document_id))
            .order_by(_r.c.created_at, _r.c.id)
        )
        return [revision(row) for row in rows]

    def some_storage_keys(self, *, limit: int, other_than: uuid.UUID | None = None) -> list[str]:
        """The storage keys of up to ``limit`` revisions (not ``other_than``), any of them.

        No order: the first rows found, so that the read stops early on any table size.
        """
        query = sa.select(_r.c.storage_key).limit(limit)
        if other_than is not None:
            query = query.where(_r.c.id != other_than)
        return list(self._execute(query).scalars())

    def add_many(self, revisions: Sequence[NewRevision]) -> list[uuid.UUID]:
        """Append the next revision of many live documents in one statement; return their ids.

        At most one revision per document in a call. Every input is checked first, and every
        document must be live: otherwise :class:`ValidationError` or :class:`NotFound`, and
        nothing is written. MIME types are stored normalised. As with :meth:`add`, the
        documents' current revisions do not move
        (:meth:`.DocumentRepository.set_current_revisions` does that). No savepoint: if the
        database refuses the statement, roll the unit of work back.
        """
        rows = [_checked(revision) for revision in revisions]
        documents = [revision.document_id for revision in revisions]
        if len(set(documents)) != len(documents):
            raise ValidationError("add_many takes at most one revision per document")
        if not rows:
            return []
        uploader = self._actor()
        self._require_live_documents(documents)
        with translated(self._conn, f"{len(rows)} revisions", savepoint=False, user=uploader):
            added = self._execute(
                _add_many_statement(),
                {"revisions": _recordset.encode(rows), "uploaded_by": uploader},
            )
            by_document = {row.document_id: row.id for row in added}
        return [by_document[document_id] for document_id in documents]

    def _require_live_documents(self, document_ids: Sequence[uuid.UUID]) -> None:
        live = set(self._execute(documents.live_ids(document_ids)).scalars())
        missing = [document_id for document_id in document_ids if document_id not in live]
        if missing:
            raise NotFound(f"document {missing[0]} does not exist")

    def _require_live_document(self, document_id: uuid.UUID) -> None:
        if self._execute(documents.live_id(document_id)).one_or_none() is None:
            raise NotFound(f"document {document_id} does not exist")


def _checked(revision: NewRevision) -> dict[str, object]:
    return {
        "document_id": revision.document_id,
        **checked_content(
            storage_key=revision.storage_key,
            sha256=revision.sha256,
            size_bytes=revision.size_bytes,
            mime_type=revision.mime_type,
        ),
    }


def checked_content(
    *, storage_key: str, sha256: str, size_bytes: int, mime_type: str
) -> dict[str, object]:
    """The content columns of a new revision, checked (:class:`ValidationError`).

    The MIME type is normalised (``text/SGML`` as ``text/sgml``).
    """
    mime_type = normalize_mime_type(mime_type)
    check_revision(
        storage_key=storage_key, sha256=sha256, size_bytes=size_bytes, mime_type=mime_type
    )
    return {
        "storage_key": storage_key,
        "sha256": sha256,
        "size_bytes": size_bytes,
        "mime_type": mime_type,
    }


def insert_from(columns: Sequence[str], rows: sa.Select[Any]) -> sa.Insert:
    """Return: insert ``rows`` (values of ``columns``) as revisions, in one statement.

    The guard numbers each (``revision_no``, gap-free per document) after locking its
    document. Every document must have been inserted by an earlier statement: row-level
    security checks a new revision against the documents its statement's snapshot sees, and
    no part of a ``WITH`` sees what another part of the same statement inserts (issue 43).
    """
    return sa.insert(_r).from_select(list(columns), rows)


@functools.cache
def _add_many_statement() -> sa.Executable:
    batch = recordset(
        "revisions",
        [
            ("document_id", sa.Uuid()),
            ("storage_key", sa.Text()),
            ("sha256", sa.Text()),
            ("size_bytes", sa.BigInteger()),
            ("mime_type", sa.Text()),
        ],
    )
    columns = ["document_id", "storage_key", "sha256", "size_bytes", "mime_type"]
    rows = sa.select(
        *(batch.c[name] for name in columns), sa.bindparam("uploaded_by", type_=sa.Uuid())
    )
    return (
        sa.insert(_r)
        .from_select([*columns, "uploaded_by"], rows)
        .returning(_r.c.id, _r.c.document_id)
    )
