"""Every SQL statement on ``import_provenance``: where imported folders and documents came from.

One row per imported entry, keyed by the folder it was imported into and its source name (the
raw bytes of the file name): re-running an import finds what is already there by that key,
whatever titles the entries got and wherever users moved them since.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from dms.domain import ImportedEntry
from dms.errors import ValidationError
from dms.schema import tenant as t

from . import _recordset, documents, folders
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
    batch = _recordset.recordset(
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
    batch = _recordset.recordset("contents", [("document_id", sa.Uuid()), ("sha256", sa.Text())])
    return (
        sa.update(_p)
        .where(_p.c.document_id == batch.c.document_id)
        .values(sha256=batch.c.sha256, updated_at=sa.func.now())
    )
