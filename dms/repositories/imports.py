"""Every SQL statement on ``import_provenance``: where imported folders and documents came from.

One row per imported entry, keyed by the folder it was imported into and its source name (the
raw bytes of the file name): re-running an import finds what is already there by that key,
whatever titles the entries got and wherever users moved them since.

:meth:`ImportRepository.import_documents` writes new documents, their first revisions and
their provenance in one statement (data-modifying ``WITH``), the parts of which come from the
modules that own ``documents``, ``file_revisions`` and ``folders``.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from dms import citus
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
        rows = [
            {
                "parent_id": entry.parent_id,
                "source_name": entry.source_name.hex(),
                "source_path": entry.source_path.hex(),
                "folder_id": entry.folder_id,
                "document_id": entry.document_id,
                "sha256": entry.sha256,
            }
            for entry in entries
        ]
        with translated(self._conn, f"provenance of {len(rows)} imported entries", savepoint=False):
            self._execute(
                _record_statement(),
                {"entries": _recordset.encode(rows), "imported_by": self._actor()},
            )

    def import_documents(
        self, entries: Sequence[NewImportedDocument]
    ) -> list[ImportedDocument | None]:
        """Create each entry's document, first revision and provenance, in one statement.

        One result per input, in order: ``None`` where a live document of the folder already
        has the title (ignoring case), or an earlier entry of the same call took it (nothing is
        written for it; the others go on). Each document is created pointing at its revision,
        at version 2, as :func:`dms.services.add_revision` leaves a new document. Every folder
        must be live, else :class:`~dms.errors.NotFound` and nothing is written. No savepoint:
        if the database refuses the statement, roll the unit of work back.

        On Citus, five statements with the same outcome: a document and its first revision
        reference each other (``fk_documents_current_revision``, not deferrable), so one
        statement must insert both, and Citus runs each part of a data-modifying ``WITH`` as a
        statement of its own. There the documents are inserted, then the revisions, then the
        documents are pointed at them (an ``UPDATE``), and the provenance recorded.
        """
        rows = [_import_row(entry) for entry in entries]
        if not rows:
            return []
        if citus.is_citus(self._conn):
            return self._import_step_by_step(entries, rows)
        in_folders = {entry.folder_id for entry in entries}
        with translated(self._conn, f"{len(rows)} imported documents", savepoint=False):
            created = self._execute(
                _import_documents_statement(),
                {
                    "entries": _recordset.encode(rows),
                    "actor": self._actor(),
                    **folders.folder_parameters(in_folders),
                },
            )
            by_revision = {row.revision_id: row.document_id for row in created}
        if not by_revision:
            # Every title was taken, or a folder is missing (then nothing was written at all).
            self._require_live_folders(in_folders)
        results: list[ImportedDocument | None] = []
        for row in rows:
            document_id = by_revision.get(row["revision_id"])
            results.append(
                None
                if document_id is None
                else ImportedDocument(document_id=document_id, revision_id=row["revision_id"])
            )
        return results

    def _import_step_by_step(
        self, entries: Sequence[NewImportedDocument], rows: list[dict[str, Any]]
    ) -> list[ImportedDocument | None]:
        """:meth:`import_documents` for Citus, a statement per step (see there)."""
        documents_of = documents.DocumentRepository(
            self._conn, tenant=self._tenant, user_id=self._user_id
        )
        created = documents_of.add_many(
            [NewDocument(title=e.title, folder_id=e.folder_id) for e in entries]
        )
        made = [(e, row, d) for e, row, d in zip(entries, rows, created, strict=True) if d]
        revision_ids = revisions.RevisionRepository(
            self._conn, tenant=self._tenant, user_id=self._user_id
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
        self.record(
            [
                NewImportedEntry(
                    parent_id=e.folder_id,
                    source_name=e.source_name,
                    source_path=e.source_path,
                    document_id=d,
                    sha256=e.sha256,
                )
                for e, _, d in made
            ]
        )
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
def _record_statement() -> sa.Executable:
    batch = recordset(
        "entries",
        [
            ("parent_id", sa.Uuid()),
            ("source_name", sa.Text()),
            ("source_path", sa.Text()),
            ("folder_id", sa.Uuid()),
            ("document_id", sa.Uuid()),
            ("sha256", sa.Text()),
        ],
    )
    rows = sa.select(
        batch.c.parent_id,
        sa.func.decode(batch.c.source_name, "hex"),
        sa.func.decode(batch.c.source_path, "hex"),
        batch.c.folder_id,
        batch.c.document_id,
        batch.c.sha256,
        sa.bindparam("imported_by", type_=sa.Uuid()),
    )
    columns = [
        "parent_id",
        "source_name",
        "source_path",
        "folder_id",
        "document_id",
        "sha256",
        "imported_by",
    ]
    return sa.insert(_p).from_select(columns, rows)


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
        # Chosen here, not by the database: the document row names its revision before the
        # revision row exists (both are inserted by the same statement).
        "revision_id": uuid.uuid4(),
        "source_name": entry.source_name.hex(),
        "source_path": entry.source_path.hex(),
        **content,
    }


@functools.cache
def _import_documents_statement() -> sa.Executable:
    """Documents, their revisions and their provenance from ``:entries``, in one statement.

    ``WITH entries AS (SELECT ... FROM json_to_recordset(:entries)), created AS (INSERT INTO
    documents ... WHERE`` the folders are live and locked ``ON CONFLICT DO NOTHING RETURNING
    ...), revised AS (INSERT INTO file_revisions SELECT ... FROM created JOIN entries ...),
    recorded AS (INSERT INTO import_provenance SELECT ... FROM created JOIN entries ...)
    SELECT`` each created document's id and revision id. Only created documents get a revision
    and provenance; the foreign keys between the three are checked at the end of the
    statement, when all rows are in.
    """
    batch = recordset(
        "entries",
        [
            ("title", sa.Text()),
            ("folder_id", sa.Uuid()),
            ("revision_id", sa.Uuid()),
            ("source_name", sa.Text()),
            ("source_path", sa.Text()),
            ("storage_key", sa.Text()),
            ("sha256", sa.Text()),
            ("size_bytes", sa.BigInteger()),
            ("mime_type", sa.Text()),
        ],
    )
    entries = sa.select(batch).cte("entries")
    actor = sa.bindparam("actor", type_=sa.Uuid())
    created = documents.insert_new(
        ["title", "folder_id", "created_by", "current_revision_id", "version"],
        sa.select(
            entries.c.title,
            entries.c.folder_id,
            actor,
            entries.c.revision_id,
            sa.literal(2, sa.Integer()),
        ).where(folders.all_live_locked()),
    ).cte("created")
    joined = created.join(entries, entries.c.revision_id == created.c.current_revision_id)
    revised = revisions.insert_from(
        ["id", "document_id", "storage_key", "sha256", "size_bytes", "mime_type", "uploaded_by"],
        sa.select(
            created.c.current_revision_id,
            created.c.id,
            entries.c.storage_key,
            entries.c.sha256,
            entries.c.size_bytes,
            entries.c.mime_type,
            actor,
        ).select_from(joined),
    ).cte("revised")
    recorded = (
        sa.insert(_p)
        .from_select(
            ["parent_id", "source_name", "source_path", "document_id", "sha256", "imported_by"],
            sa.select(
                created.c.folder_id,
                sa.func.decode(entries.c.source_name, "hex"),
                sa.func.decode(entries.c.source_path, "hex"),
                created.c.id,
                entries.c.sha256,
                actor,
            ).select_from(joined),
        )
        .cte("recorded")
    )
    return (
        sa.select(
            created.c.id.label("document_id"), created.c.current_revision_id.label("revision_id")
        )
        .add_cte(revised)
        .add_cte(recorded)
    )
