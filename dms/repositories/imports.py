"""Every SQL statement on ``import_provenance``: where imported folders and documents came from.

One row per imported entry, keyed by the folder it was imported into and its source name (the
raw bytes of the file name): re-running an import finds what is already there by that key,
whatever titles the entries got and wherever users moved them since.

:meth:`ImportRepository.import_documents` writes new documents, then their first revisions
(the key between them deferred for those two statements), then their provenance; the parts come
from the modules that own ``documents``, ``file_revisions`` and ``folders``.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dms import citus, tenancy
from dms.domain import ImportedEntry, NewDocument, NewRevision
from dms.domain.validation import TITLE_MAX_CHARS, check_name
from dms.errors import NotFound, ValidationError
from dms.schema import tenant as t
from dms.schema.recordsets import recordset

from . import _recordset, documents, folders, revisions
from ._base import Repository
from .errors import translated

_p = t.import_provenance


@dataclass(frozen=True, kw_only=True)
class NewImportedEntry:
    """A provenance row to record: a folder or (with its ``sha256``) a document."""

    parent_id: uuid.UUID | None
    source_name: bytes
    source_path: bytes
    folder_id: uuid.UUID | None = None
    document_id: uuid.UUID | None = None
    sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class NewImportedDocument:
    """A file to import as a new document with its first revision (the content) and provenance.

    The document goes into ``folder_id`` (``None``: the top level) as ``title``; its provenance
    says it was imported into that folder from ``source_name`` at ``source_path``.
    """

    title: str
    folder_id: uuid.UUID | None
    source_name: bytes
    source_path: bytes
    storage_key: str
    sha256: str
    size_bytes: int
    mime_type: str


@dataclass(frozen=True, kw_only=True)
class ImportedDocument:
    """A document created by :meth:`ImportRepository.import_documents`, and its revision."""

    document_id: uuid.UUID
    revision_id: uuid.UUID


class ImportRepository(Repository):
    """The import provenance of one tenant."""

    def imported_into(self, parent_ids: Iterable[uuid.UUID | None]) -> list[ImportedEntry]:
        """Every entry imported into one of ``parent_ids`` (``None``: the top level)."""
        ids = set(parent_ids)
        folder_ids = sorted(i for i in ids if i is not None)
        if not ids:
            return []
        where: sa.ColumnElement[bool] = _p.c.parent_id.in_(folder_ids)
        if None in ids:
            where = sa.or_(where, _p.c.parent_id.is_(None))
        in_trash = sa.or_(
            folders.is_trashed(_p.c.folder_id), documents.is_trashed(_p.c.document_id)
        )
        rows = self._execute(sa.select(*_p.c, in_trash.label("in_trash")).where(where))
        return [ImportedEntry(**row._mapping) for row in rows]

    def record(self, entries: Sequence[NewImportedEntry]) -> None:
        """Record many entries in one statement, as imported by the unit's user."""
        if not entries:
            return
        for entry in entries:
            if (entry.folder_id is None) == (entry.document_id is None):
                raise ValidationError("an imported entry is one folder or one document")
        actor = self._actor()
        rows = [
            {
                "parent_id": entry.parent_id,
                "source_name": entry.source_name,
                "source_path": entry.source_path,
                "folder_id": entry.folder_id,
                "document_id": entry.document_id,
                "sha256": entry.sha256,
                "imported_by": actor,
            }
            for entry in entries
        ]
        # Rows of VALUES (SQLAlchemy sends them a page at a time), not a JSON recordset: Citus
        # writes an INSERT ... SELECT of a function's rows by COPY, which row-level security
        # refuses.
        with translated(self._conn, f"provenance of {len(rows)} imported entries", savepoint=False):
            self._execute(sa.insert(_p), rows)

    def import_documents(
        self, entries: Sequence[NewImportedDocument]
    ) -> list[ImportedDocument | None]:
        """Create each entry's document, first revision and provenance, in three statements.

        One result per input, in order: ``None`` where a live document of the folder already
        has the title (ignoring case), or an earlier entry of the same call took it (nothing is
        written for it; the others go on). Each document is created pointing at its revision,
        at version 2, as :func:`dms.services.add_revision` leaves a new document. Every folder
        must be live, else :class:`~dms.errors.NotFound` and nothing is written. No savepoint:
        if the database refuses a statement, roll the unit of work back.

        The documents go in first, already pointing at their revisions, then the revisions,
        then the provenance: row-level security checks a new revision or provenance row against
        the documents its statement sees, and no part of a statement sees what another part of
        it inserted, so one statement writing them all was refused under an ordinary role.
        Between the first two, the documents' key to their current revision
        (:data:`~dms.repositories.documents.CURRENT_REVISION_KEY`) is deferred, and checked
        again once the revisions are in, before this returns: two ``SET CONSTRAINTS`` more,
        rather than an ``UPDATE`` of every new document, whose triggers would rebuild its
        search rows, check the edit right and record an audit event once more.

        On Citus, which passes neither ``SET CONSTRAINTS`` on to the tenant's node nor a
        data-modifying ``WITH`` whole, five statements, a step each: the documents, a check
        that they are live, the revisions, the documents pointed at them (an ``UPDATE``), and
        the provenance.
        """
        rows = [_import_row(entry) for entry in entries]
        if not rows:
            return []
        if citus.is_citus(self._conn):
            return self._import_step_by_step(entries, rows)
        in_folders = {entry.folder_id for entry in entries}
        created = self._insert_with_revisions(rows, in_folders)
        if not created:
            # Every title was taken, or a folder is missing (then nothing was written at all).
            self._require_live_folders(in_folders)
        self.record(
            [
                _provenance(entry, row["document_id"])
                for entry, row in zip(entries, rows, strict=True)
                if row["document_id"] in created
            ]
        )
        return [
            ImportedDocument(document_id=row["document_id"], revision_id=row["revision_id"])
            if row["document_id"] in created
            else None
            for row in rows
        ]

    def _insert_with_revisions(
        self, rows: list[dict[str, Any]], in_folders: set[uuid.UUID | None]
    ) -> set[uuid.UUID]:
        """Insert the documents of ``rows``, then their revisions; return the documents' ids.

        The key from the documents to their revisions is deferred for these two statements
        only, and checked before this returns: whatever the caller does next in the
        transaction is checked at each statement's end, as everywhere else. (On an error the
        transaction is aborted, to be rolled back, and the key goes with it.)
        """
        schema = tenancy.schema_name(self._tenant)
        self._execute_command(documents.check_current_revisions(schema, deferred=True))
        created = self._insert_documents(rows, in_folders)
        self._insert_first_revisions([row for row in rows if row["document_id"] in created])
        with translated(self._conn, f"{len(created)} imported documents", savepoint=False):
            self._execute_command(documents.check_current_revisions(schema, deferred=False))
        return created

    def _insert_documents(
        self, rows: list[dict[str, Any]], in_folders: set[uuid.UUID | None]
    ) -> set[uuid.UUID]:
        """Insert the documents of ``rows``; return the ids inserted."""
        columns = ("document_id", "revision_id", "title", "folder_id")
        with translated(self._conn, f"{len(rows)} imported documents", savepoint=False):
            return set(
                self._execute(
                    _import_documents_statement(),
                    {
                        "entries": _recordset.encode([{c: r[c] for c in columns} for r in rows]),
                        "actor": self._actor(),
                        **folders.folder_parameters(in_folders),
                    },
                ).scalars()
            )

    def _insert_first_revisions(self, rows: list[dict[str, Any]]) -> None:
        """Insert the revision of each of ``rows``, whose documents are in, pointing at it."""
        if not rows:
            return
        columns = ("revision_id", "document_id", "storage_key", "sha256", "size_bytes", "mime_type")
        with translated(self._conn, f"{len(rows)} imported revisions", savepoint=False):
            self._execute(
                _import_revisions_statement(),
                {
                    "revisions": _recordset.encode([{c: r[c] for c in columns} for r in rows]),
                    "actor": self._actor(),
                },
            )

    def _import_step_by_step(
        self, entries: Sequence[NewImportedDocument], rows: list[dict[str, Any]]
    ) -> list[ImportedDocument | None]:
        """:meth:`import_documents` for Citus, a statement per step (see there)."""
        documents_of = documents.DocumentRepository(
            self._conn, tenant=self._tenant, user_id=self._user_id, system=self._system
        )
        created = documents_of.add_many(
            [NewDocument(title=e.title, folder_id=e.folder_id) for e in entries]
        )
        made = [(e, row, d) for e, row, d in zip(entries, rows, created, strict=True) if d]
        revision_ids = revisions.RevisionRepository(
            self._conn, tenant=self._tenant, user_id=self._user_id, system=self._system
        ).add_many(
            [
                NewRevision(
                    document_id=document_id,
                    storage_key=row["storage_key"],
                    sha256=row["sha256"],
                    size_bytes=row["size_bytes"],
                    mime_type=row["mime_type"],
                )
                for _, row, document_id in made
            ]
        )
        documents_of.set_current_revisions(
            {d: r for (_, _, d), r in zip(made, revision_ids, strict=True)}
        )
        self.record([_provenance(e, d) for e, _, d in made])
        by_document = {d: r for (_, _, d), r in zip(made, revision_ids, strict=True)}
        return [
            None if d is None else ImportedDocument(document_id=d, revision_id=by_document[d])
            for d in created
        ]

    def _require_live_folders(self, folder_ids: set[uuid.UUID | None]) -> None:
        wanted = sorted(i for i in folder_ids if i is not None)
        if wanted:
            found = set(self._execute(folders.lock_live_many(wanted)).scalars())
            missing = [i for i in wanted if i not in found]
            if missing:
                raise NotFound(f"folder {missing[0]} does not exist")

    def record_content(self, sha256_by_document: Mapping[uuid.UUID, str]) -> None:
        """Remember the content each document (key) was last imported with (value)."""
        if not sha256_by_document:
            return
        rows = [{"document_id": d, "sha256": s} for d, s in sorted(sha256_by_document.items())]
        with translated(
            self._conn, f"provenance of {len(rows)} re-imported documents", savepoint=False
        ):
            self._execute(_record_content_statement(), {"contents": _recordset.encode(rows)})


@functools.cache
def _record_content_statement() -> sa.Executable:
    batch = recordset("contents", [("document_id", sa.Uuid()), ("sha256", sa.Text())])
    return (
        sa.update(_p)
        .where(_p.c.document_id == batch.c.document_id)
        .values(sha256=batch.c.sha256, updated_at=sa.func.now())
    )


def _import_row(entry: NewImportedDocument) -> dict[str, Any]:
    check_name("document", entry.title, max_chars=TITLE_MAX_CHARS)
    content = revisions.checked_content(
        storage_key=entry.storage_key,
        sha256=entry.sha256,
        size_bytes=entry.size_bytes,
        mime_type=entry.mime_type,
    )
    return {
        "title": entry.title,
        "folder_id": entry.folder_id,
        # Chosen here, not by the database: a document names its revision before the revision
        # exists, and each of the two statements finds its rows of the batch by them.
        "document_id": uuid.uuid4(),
        "revision_id": uuid.uuid4(),
        **content,
    }


def _provenance(entry: NewImportedDocument, document_id: uuid.UUID) -> NewImportedEntry:
    """The provenance of the document created for ``entry``."""
    return NewImportedEntry(
        parent_id=entry.folder_id,
        source_name=entry.source_name,
        source_path=entry.source_path,
        document_id=document_id,
        sha256=entry.sha256,
    )


@functools.cache
def _import_documents_statement() -> sa.Executable:
    """Documents from ``:entries``, in one statement.

    ``INSERT INTO documents SELECT ... FROM json_to_recordset(:entries) WHERE`` the folders are
    live and locked ``ON CONFLICT DO NOTHING RETURNING id``. Each document points at its
    revision (not in yet: the key is deferred), at version 2.
    """
    batch = recordset(
        "entries",
        [
            ("document_id", sa.Uuid()),
            ("revision_id", sa.Uuid()),
            ("title", sa.Text()),
            ("folder_id", sa.Uuid()),
        ],
    )
    return documents.insert_new(
        ["id", "title", "folder_id", "created_by", "current_revision_id", "version"],
        sa.select(
            batch.c.document_id,
            batch.c.title,
            batch.c.folder_id,
            sa.bindparam("actor", type_=sa.Uuid()),
            batch.c.revision_id,
            sa.literal(2, sa.Integer()),
        ).where(folders.all_live_locked()),
    )


@functools.cache
def _import_revisions_statement() -> sa.Executable:
    """First revisions from ``:revisions``, of documents that point at them already.

    ``INSERT INTO file_revisions SELECT ... FROM json_to_recordset(:revisions)``. The
    documents were inserted by an earlier statement, so the revisions' policy sees them.
    """
    batch = recordset(
        "revisions",
        [
            ("revision_id", sa.Uuid()),
            ("document_id", sa.Uuid()),
            ("storage_key", sa.Text()),
            ("sha256", sa.Text()),
            ("size_bytes", sa.BigInteger()),
            ("mime_type", sa.Text()),
        ],
    )
    return revisions.insert_from(
        ["id", "document_id", "storage_key", "sha256", "size_bytes", "mime_type", "uploaded_by"],
        sa.select(
            batch.c.revision_id,
            batch.c.document_id,
            batch.c.storage_key,
            batch.c.sha256,
            batch.c.size_bytes,
            batch.c.mime_type,
            sa.bindparam("actor", type_=sa.Uuid()),
        ),
    )
