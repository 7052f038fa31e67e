"""Every SQL expression on ``file_revisions``.

The database numbers revisions (trigger ``file_revisions_guard``): it locks the document row,
so two uploads to one document in separate transactions get 1 and 2, never a duplicate or a
gap. Revisions are append-only; they go only with their document. Conditions on the document
(live, its current revision) come from :mod:`.documents`.
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Row

from dms.domain import Revision
from dms.domain.validation import check_id, check_revision, check_sha256
from dms.errors import AlreadyExists, NotFound
from dms.schema import tenant as t

from . import _rows, documents
from ._base import Repository
from .errors import ErrorFactory, translated

_r = t.file_revisions
COLUMNS = tuple(_r.c)


def revision(row: Row[Any]) -> Revision:
    """Return the revision in ``row``."""
    return _rows.build(Revision, row)


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
        :func:`dms.services.add_revision`, which does both.
        """
        check_id("document", document_id)
        check_revision(
            storage_key=storage_key, sha256=sha256, size_bytes=size_bytes, mime_type=mime_type
        )
        self._require_live_document(document_id)
        refusals: dict[str, ErrorFactory] = {
            "uq_file_revisions_storage_key": lambda: AlreadyExists(
                f"storage key {storage_key!r} already belongs to a revision"
            ),
        }
        with translated(self._conn, f"revision of document {document_id}", constraints=refusals):
            row = self._execute(
                sa.insert(_r)
                .values(
                    document_id=document_id,
                    storage_key=storage_key,
                    sha256=sha256,
                    size_bytes=size_bytes,
                    mime_type=mime_type,
                    uploaded_by=self._actor(),
                )
                .returning(*COLUMNS)
            ).one()
        return revision(row)

    def get(self, revision_id: uuid.UUID) -> Revision:
        """Return the revision, or raise :class:`NotFound`."""
        check_id("revision", revision_id)
        row = self._execute(sa.select(*COLUMNS).where(_r.c.id == revision_id)).one_or_none()
        if row is None:
            raise NotFound(f"revision {revision_id} does not exist")
        return revision(row)

    def history(self, document_id: uuid.UUID) -> list[Revision]:
        """Return the document's revisions, oldest (number 1) first."""
        check_id("document", document_id)
        rows = self._execute(
            sa.select(*COLUMNS).where(_r.c.document_id == document_id).order_by(_r.c.revision_no)
        )
        return [revision(row) for row in rows]

    def current(self, document_id: uuid.UUID) -> Revision | None:
        """Return the document's current revision (``None`` before the first upload)."""
        check_id("document", document_id)
        row = self._execute(
            sa.select(*COLUMNS).where(_r.c.id == documents.current_revision_of(document_id))
        ).one_or_none()
        return None if row is None else revision(row)

    def find_by_sha256(self, sha256: str) -> list[Revision]:
        """Return the revisions of live documents with this content hash (duplicate warning)."""
        digest = check_sha256(sha256)
        rows = self._execute(
            sa.select(*COLUMNS)
            .where(_r.c.sha256 == digest, documents.is_live(_r.c.document_id))
            .order_by(_r.c.created_at, _r.c.id)
        )
        return [revision(row) for row in rows]

    def _require_live_document(self, document_id: uuid.UUID) -> None:
        if self._execute(documents.live_id(document_id)).one_or_none() is None:
            raise NotFound(f"document {document_id} does not exist")
