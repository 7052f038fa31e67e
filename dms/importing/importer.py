"""Importing a file tree into a tenant, in batches that each commit whole.

Folders are mirrored as folders, files become documents with a first revision. The tree is
read in batches of files; each batch is one transaction that claims its blobs
(content-addressed, :mod:`dms.blobs`) and makes sure their files are there, creates the
folders level by level (a statement per level), the documents with their revisions and
provenance (one statement, :meth:`~dms.repositories.imports.ImportRepository.import_documents`),
enqueues the verification jobs (one per revision, idempotent, one statement) and commits:
about six round trips for 500 files. An interrupted import therefore leaves whole batches
behind: every document with its revision, its blob and its job, or nothing.

Three threads work a batch apart: while one batch is in the database, the missing blobs of
the next are written ahead of its transaction (:func:`dms.blobs.write_ahead`) and the batch
after that is read and hashed.

Re-running the same import resumes it: each entry is looked up in the import provenance by
the folder it goes into and its source name (bytes). A folder found there is reused; a file
found with the same SHA-256 is left alone; a file found with other content gets a new
revision. Nothing is imported twice.

Within a transaction the blobs are claimed first, before any folder is created: folder
inserts take the tenant's folder-tree lock (trigger ``folders_guard``), and two imports that
took it and blob locks in opposite orders could wait for each other. A file left out after its
blob was claimed (its name taken by a concurrent writer, with ``--names refuse``) leaves that
blob unreferenced: :func:`dms.blobs.release_blobs` without keys sweeps it. Files written ahead
for entries that are then not imported (skipped, or an import stopped early) are files
without a row, as after a crash: nothing references them, and a later import of the same
bytes finds them there.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy.engine import Engine

from dms import jobs, tenancy
from dms.blobs import StoredContents, claim_contents, write_ahead, write_contents
from dms.config import Settings
from dms.domain import NewFolder, NewRevision
from dms.domain.model import ImportedEntry
from dms.domain.validation import FOLDER_NAME_MAX_CHARS, TITLE_MAX_CHARS
from dms.errors import ValidationError
from dms.processing import define_processing_fields, verification_jobs
from dms.repositories.imports import ImportRepository, NewImportedDocument, NewImportedEntry
from dms.schema.tenant import MAX_FOLDER_DEPTH
from dms.services import extraction_jobs, set_values
from dms.storage import BlobStore, Content
from dms.uow import UnitOfWork

from .files import ReadFile, read_file
from .names import NamePolicy, SiblingNames, readable_name
from .report import (
    Action,
    ImportProgress,
    ImportReport,
    ReportEntry,
    SkipReason,
    shown_path,
)
from .walk import EntryKind, SourceEntry, source_root, walk

#: Files per batch (one transaction each).
DEFAULT_BATCH_FILES = 500
#: A batch also ends once it holds this many bytes in memory.
BATCH_MEMORY_BYTES = 32 * 1024 * 1024
#: Attempts at a free name when concurrent writers keep taking the chosen one.
NAME_ATTEMPTS = 10

_FOLDER = "folder"
_DOCUMENT = "document"


@dataclass(kw_only=True)
class _Item:
    """One source entry of a batch, with what reading it gave."""

    entry: SourceEntry
    read: ReadFile | None = None
    error: str | None = None


@dataclass(kw_only=True)
class _Read:
    """A batch of source entries, read, and the keys of the blobs written ahead for it."""

    items: list[_Item]
    written_ahead: frozenset[str] = frozenset()


@dataclass(kw_only=True)
class _NewFolder:
    entry: SourceEntry
    name: str


@dataclass(kw_only=True)
class _NewFile:
    entry: SourceEntry
    read: ReadFile
    #: The document imported from this file earlier (its content changed since), if any.
    known_document: uuid.UUID | None = None
    #: The document that gets the revision: the known one, or the one created for it.
    document_id: uuid.UUID | None = None
    #: The revision of the file, once added.
    revision_id: uuid.UUID | None = None


@dataclass(kw_only=True)
class _Batch:
    """What one batch will write, planned before its first write."""

    folders: list[_NewFolder] = field(default_factory=list)
    files: list[_NewFile] = field(default_factory=list)
    provenance: list[NewImportedEntry] = field(default_factory=list)


class _Provenance:
    """The import provenance of some folders' entries, read per folder when first needed."""

    def __init__(self, imports: ImportRepository, parents: set[uuid.UUID | None]) -> None:
        self._imports = imports
        self._by_parent: dict[uuid.UUID | None, dict[bytes, ImportedEntry]] = {
            parent: {} for parent in parents
        }
        for entry in imports.imported_into(parents):
            self._by_parent[entry.parent_id][entry.source_name] = entry

    def get(self, parent_id: uuid.UUID | None, source_name: bytes) -> ImportedEntry | None:
        """The entry imported into ``parent_id`` under ``source_name``, if any."""
        if parent_id not in self._by_parent:
            found = self._imports.imported_into([parent_id])
            self._by_parent[parent_id] = {entry.source_name: entry for entry in found}
        return self._by_parent[parent_id].get(source_name)


class _Importer:
    """One run of :func:`import_tree`; its state lives as long as the run."""

    def __init__(
        self,
        engine: Engine,
        root: bytes,
        *,
        tenant: str,
        user_id: uuid.UUID,
        store: BlobStore,
        into: uuid.UUID | None,
        policy: NamePolicy,
        batch_files: int,
        progress: Callable[[ImportProgress], None] | None,
        settings: Settings | None,
    ) -> None:
        self.engine, self.root, self.tenant, self.user_id = engine, root, tenant, user_id
        self.store, self.into, self.policy = store, into, policy
        self.batch_files, self.progress, self.settings = batch_files, progress, settings
        self.report = ImportReport(
            tenant=tenant, source=shown_path(root), into=into, name_policy=policy.value
        )
        self.counts, self.timings = self.report.counts, self.report.timings
        self.into_depth = 0
        self.defaults: dict[uuid.UUID, object] = {}
        # Folder of the tree (relative path) -> its id, once created or found.
        self.folder_ids: dict[bytes, uuid.UUID] = {}
        # Folders found already imported: their contents may hold earlier imports.
        self.found: set[bytes] = set()
        self.skipped_folders: set[bytes] = set()
        self.siblings: dict[tuple[str, bytes | None], SiblingNames] = {}
        self._blob_clock = threading.Lock()
        self.started = time.perf_counter()

    def run(self) -> ImportReport:
        self._prepare()
        with (
            ThreadPoolExecutor(1, thread_name_prefix="dms-import-reader") as reader,
            ThreadPoolExecutor(1, thread_name_prefix="dms-import-ahead") as writer,
        ):
            # Three stages, each a batch ahead of the next: while batch k is written to the
            # database, the blobs of batch k + 1 are written ahead and batch k + 2 is read.
            # Reading and hashing, file system flushes and the server's work overlap.
            read = _ahead(reader, self._batches(walk(self.root)), self._discard)
            written = _ahead(writer, map(self._write_ahead, read), self._discard)
            with closing(read), closing(written):
                while (batch := self._next(written)) is not None:
                    try:
                        self._import(batch)
                    finally:
                        self._discard(batch)
                    if self.progress is not None:
                        self.progress(self._progress())
        self.timings.total = time.perf_counter() - self.started
        return self.report

    def _next(self, batches: Iterator[_Read]) -> _Read | None:
        waited = time.perf_counter()
        batch = next(batches, None)
        self.timings.waiting_for_reads += time.perf_counter() - waited
        return batch

    def _write_ahead(self, batch: _Read) -> _Read:
        """Write the batch's blobs that are missing, before its transaction claims them."""
        started = time.perf_counter()
        contents = [item.read.content for item in batch.items if item.read is not None]
        try:
            batch.written_ahead = write_ahead(self.store, self.tenant, contents)
        finally:
            self._add_blob_time(time.perf_counter() - started)
        return batch

    def _add_blob_time(self, seconds: float) -> None:
        # Two threads write blobs (ahead, and after the claim): += is not atomic.
        with self._blob_clock:
            self.timings.blob_writes += seconds

    def _discard(self, batch: _Read) -> None:
        """Remove the staging files a batch still holds (the imported ones are gone already)."""
        for item in batch.items:
            if item.read is not None:
                self.store.discard(item.read.content)

    def _unit(self) -> UnitOfWork:
        return UnitOfWork(
            self.engine, tenant=self.tenant, user_id=self.user_id, settings=self.settings
        )

    def _progress(self) -> ImportProgress:
        return ImportProgress(
            files_done=self.counts.files_done,
            bytes_read=self.counts.bytes_read,
            elapsed_seconds=time.perf_counter() - self.started,
        )

    # --- before the first batch ------------------------------------------------------------

    def _prepare(self) -> None:
        with self._unit() as uow:
            tenancy.get_tenant(uow.connection, self.tenant)
            if self.into is not None:
                self.into_depth = len(uow.folders.path(uow.folders.get(self.into).id))
            define_processing_fields(uow)
            self.defaults = _defaults(uow)
            uow.commit()

    # --- reading ---------------------------------------------------------------------------

    def _batches(self, entries: Iterable[SourceEntry]) -> Iterator[_Read]:
        batch: list[_Item] = []
        files = held = 0
        for entry in entries:
            item = self._read(entry)
            batch.append(item)
            if entry.kind is EntryKind.FILE:
                files += 1
                held += len(item.read.content.data or b"") if item.read else 0
            if files >= self.batch_files or held >= BATCH_MEMORY_BYTES:
                yield _Read(items=batch)
                batch, files, held = [], 0, 0
        if batch:
            yield _Read(items=batch)

    def _read(self, entry: SourceEntry) -> _Item:
        item = _Item(entry=entry)
        if entry.kind is not EntryKind.FILE or self._parent_skipped(entry):
            return item
        started = time.perf_counter()
        try:
            item.read = read_file(entry.path, readable_name(entry.name).text, self.store)
            self.counts.bytes_read += item.read.content.size_bytes
        except OSError as exc:
            item.error = exc.strerror or str(exc)
        self.timings.reading_and_hashing += time.perf_counter() - started
        return item

    # --- one batch, one transaction -------------------------------------------------------

    def _import(self, read: _Read) -> None:
        started = time.perf_counter()
        items = read.items
        with self._unit() as uow:
            known = self._known(uow, items)
            batch = _Batch()
            self._plan_folders(uow, items, known, batch)
            self._classify_files(items, known, batch)
            contents = [f.read.content for f in batch.files]
            keys = claim_contents(uow, contents)
            # The files are written while the rows are written: both only have to be done
            # before the commit, which is when the revisions become visible.
            with ThreadPoolExecutor(1, thread_name_prefix="dms-import-blobs") as writer:
                writing = writer.submit(self._write_blobs, keys, contents, read.written_ahead)
                self._create_folders(uow, batch)
                self._create_documents(uow, batch, keys)
                revisions = self._add_revisions(uow, batch, keys)
                self._record(uow, batch)
                enqueued = jobs.enqueue_many(
                    uow,
                    [
                        *verification_jobs(self.tenant, revisions),
                        *extraction_jobs(self.tenant, revisions),
                    ],
                )
                waited = time.perf_counter()
                stored = writing.result()
                blob_wait = time.perf_counter() - waited
            uow.commit()
        self.counts.blobs_written += stored.written
        self.counts.blobs_already_stored += stored.already_stored
        self.counts.jobs_enqueued += sum(1 for job in enqueued if job.created)
        self.counts.batches += 1
        self.timings.waiting_for_blobs += blob_wait
        self.timings.database += time.perf_counter() - started - blob_wait

    def _write_blobs(
        self, keys: dict[str, str], contents: list[Content], written_ahead: frozenset[str]
    ) -> StoredContents:
        started = time.perf_counter()
        try:
            return write_contents(self.store, keys, contents, written_ahead=written_ahead)
        finally:
            self._add_blob_time(time.perf_counter() - started)

    def _record(self, uow: UnitOfWork, batch: _Batch) -> None:
        imports = uow.imports
        imports.record(batch.provenance)
        imports.record_content(
            {f.known_document: f.read.content.sha256 for f in batch.files if f.known_document}
        )

    def _known(self, uow: UnitOfWork, items: list[_Item]) -> _Provenance:
        """Provenance of the entries whose folder existed before this batch, in one query.

        Folders found during the batch have theirs read when first asked (:meth:`_lookup`).
        """
        parents: set[uuid.UUID | None] = set()
        for item in items:
            if item.entry.parent is None:
                parents.add(self.into)
            elif item.entry.parent in self.found:
                parents.add(self.folder_ids[item.entry.parent])
        return _Provenance(uow.imports, parents)

    def _parent_id(self, entry: SourceEntry) -> uuid.UUID | None:
        return self.into if entry.parent is None else self.folder_ids[entry.parent]

    def _parent_skipped(self, entry: SourceEntry) -> bool:
        return entry.parent is not None and entry.parent in self.skipped_folders

    def _lookup(self, known: _Provenance, entry: SourceEntry) -> ImportedEntry | None:
        if entry.parent is not None and entry.parent not in self.found:
            return None  # a folder created by this run holds nothing imported earlier
        return known.get(self._parent_id(entry), entry.name)

    # --- planning --------------------------------------------------------------------------

    def _plan_folders(
        self,
        uow: UnitOfWork,
        items: list[_Item],
        known: _Provenance,
        batch: _Batch,
    ) -> None:
        """Decide each folder of the batch: found, to create (named), or skipped."""
        for item in items:
            entry = item.entry
            if entry.kind is not EntryKind.FOLDER or self._skip_orphan(entry):
                continue
            if self.into_depth + entry.depth > MAX_FOLDER_DEPTH:
                reason = f"deeper than the {MAX_FOLDER_DEPTH} levels folders can have"
                self._skip_folder(entry, SkipReason.TOO_DEEP, reason)
                continue
            earlier = self._lookup(known, entry)
            if earlier is not None and earlier.folder_id is not None:
                self._reuse_folder(entry, earlier, earlier.folder_id)
                continue
            name = self._name(uow, entry, _FOLDER)
            if name is None:
                self.skipped_folders.add(entry.relative)
            else:
                batch.folders.append(_NewFolder(entry=entry, name=name))

    def _reuse_folder(
        self, entry: SourceEntry, earlier: ImportedEntry, folder_id: uuid.UUID
    ) -> None:
        if earlier.in_trash:
            self._skip_folder(entry, SkipReason.IN_TRASH, "imported before, now in the trash")
            return
        self.folder_ids[entry.relative] = folder_id
        self.found.add(entry.relative)
        self.counts.folders_found += 1

    def _classify_files(
        self,
        items: list[_Item],
        known: _Provenance,
        batch: _Batch,
    ) -> None:
        """Decide each file: unchanged, a new revision of a known document, new, or skipped."""
        for item in items:
            entry = item.entry
            if entry.kind is EntryKind.SKIPPED:
                self._skip_entry(item)
                continue
            if entry.kind is not EntryKind.FILE or self._skip_orphan(entry):
                continue
            if item.read is None:
                self._skip(entry, SkipReason.UNREADABLE, f"cannot read it: {item.error}")
                continue
            earlier = self._lookup(known, entry)
            if earlier is None or earlier.document_id is None:
                batch.files.append(_NewFile(entry=entry, read=item.read))
            elif earlier.in_trash:
                self._skip(entry, SkipReason.IN_TRASH, "imported before, now in the trash")
            elif earlier.sha256 == item.read.content.sha256:
                self.counts.unchanged += 1
            else:
                known_document = earlier.document_id
                batch.files.append(
                    _NewFile(
                        entry=entry,
                        read=item.read,
                        known_document=known_document,
                        document_id=known_document,
                    )
                )

    def _skip_entry(self, item: _Item) -> None:
        entry = item.entry
        if self._skip_orphan(entry):
            return
        reason = entry.reason or "skipped"
        kind = SkipReason.UNREADABLE if reason.startswith("cannot") else SkipReason.NOT_A_FILE
        self._skip(entry, kind, reason)

    def _skip_orphan(self, entry: SourceEntry) -> bool:
        """Skip (and report) an entry whose folder was not imported; say whether it was."""
        if not self._parent_skipped(entry):
            return False
        parent = shown_path(entry.parent or b"")
        reason = f"its folder {parent} was not imported"
        if entry.kind is EntryKind.FOLDER:
            self._skip_folder(entry, SkipReason.PARENT_SKIPPED, reason)
        else:
            self._skip(entry, SkipReason.PARENT_SKIPPED, reason)
        return True

    def _skip_folder(self, entry: SourceEntry, why: SkipReason, reason: str) -> None:
        self.skipped_folders.add(entry.relative)
        self._skip(entry, why, reason)

    def _skip(self, entry: SourceEntry, why: SkipReason, reason: str) -> None:
        listing = entry.kind is EntryKind.SKIPPED and reason.startswith("cannot list")
        kind = _FOLDER if entry.kind is EntryKind.FOLDER or listing else "file"
        self.report.skipped.append(
            ReportEntry(
                path=shown_path(entry.relative),
                kind=kind,
                action=Action.SKIPPED,
                reason=reason,
                skip_reason=why,
            )
        )
        if entry.kind is not EntryKind.FOLDER:
            self.counts.skipped += 1

    # --- names ----------------------------------------------------------------------------

    def _siblings(self, uow: UnitOfWork, kind: str, entry: SourceEntry) -> SiblingNames:
        key = (kind, entry.parent)
        names = self.siblings.get(key)
        if names is None:
            names = SiblingNames()
            if entry.parent is None or entry.parent in self.found:
                names.taken.update(n.lower() for n in self._existing_names(uow, kind, entry))
            self.siblings[key] = names
        return names

    def _existing_names(self, uow: UnitOfWork, kind: str, entry: SourceEntry) -> list[str]:
        parent_id = self._parent_id(entry)
        if kind == _FOLDER:
            return [folder.name for folder in uow.folders.children(parent_id)]
        return uow.documents.titles_in(parent_id)

    def _name(self, uow: UnitOfWork, entry: SourceEntry, kind: str) -> str | None:
        """The title of a new folder or document, or ``None`` (skipped and reported)."""
        readable = readable_name(entry.name)
        if readable.changes and self.policy is NamePolicy.REFUSE:
            self._skip_named(entry, SkipReason.NAME_REFUSED, "; ".join(readable.changes))
            return None
        siblings = self._siblings(uow, kind, entry)
        name, reasons = readable.text, list(readable.changes)
        if not siblings.is_free(name):
            taken = f"a {kind} named {name!r} is already in the folder (ignoring case)"
            if self.policy is NamePolicy.REFUSE:
                self._skip_named(entry, SkipReason.NAME_TAKEN, taken)
                return None
            name = siblings.free_variant(
                name, max_chars=_max_chars(kind), is_file=kind == _DOCUMENT
            )
            reasons.append(taken)
        siblings.take(name)
        if reasons:
            self._renamed(entry, name, "; ".join(reasons))
        return name

    def _skip_named(self, entry: SourceEntry, why: SkipReason, reason: str) -> None:
        if entry.kind is EntryKind.FOLDER:
            self._skip_folder(entry, why, reason)
        else:
            self._skip(entry, why, reason)

    def _renamed(self, entry: SourceEntry, title: str, reason: str) -> None:
        kind = _FOLDER if entry.kind is EntryKind.FOLDER else "file"
        self.report.renamed.append(
            ReportEntry(
                path=shown_path(entry.relative),
                kind=kind,
                action=Action.RENAMED,
                reason=reason,
                title=title,
            )
        )
        self.counts.renamed += 1

    def _rename_again(self, entry: SourceEntry, kind: str, taken: str) -> str | None:
        """A new name after the database refused ``taken`` (a concurrent writer took it)."""
        siblings = self.siblings[(kind, entry.parent)]
        siblings.take(taken)
        reason = f"a {kind} named {taken!r} appeared in the folder meanwhile (ignoring case)"
        if self.policy is NamePolicy.REFUSE:
            self._skip_named(entry, SkipReason.NAME_TAKEN, reason)
            return None
        name = siblings.free_variant(taken, max_chars=_max_chars(kind), is_file=kind == _DOCUMENT)
        siblings.take(name)
        self._renamed(entry, name, reason)
        return name

    # --- writing --------------------------------------------------------------------------

    def _create_folders(self, uow: UnitOfWork, batch: _Batch) -> None:
        """Create the batch's new folders, shallowest first (parents before children)."""
        for depth in sorted({f.entry.depth for f in batch.folders}):
            pending = [f for f in batch.folders if f.entry.depth == depth]
            for _ in range(NAME_ATTEMPTS):
                pending = [f for f in pending if not self._parent_skipped(f.entry)]
                if not pending:
                    break
                pending = self._insert_folders(uow, batch, pending)
            for folder in pending:
                self._skip_folder(folder.entry, SkipReason.NAME_TAKEN, "no free name found")

    def _insert_folders(
        self, uow: UnitOfWork, batch: _Batch, pending: list[_NewFolder]
    ) -> list[_NewFolder]:
        """Insert ``pending``; return those refused by the database, renamed for another try."""
        created = uow.folders.add_many(
            [NewFolder(name=f.name, parent_id=self._parent_id(f.entry)) for f in pending]
        )
        again: list[_NewFolder] = []
        for planned, folder_id in zip(pending, created, strict=True):
            entry = planned.entry
            if folder_id is None:
                name = self._rename_again(entry, _FOLDER, planned.name)
                if name is not None:
                    again.append(_NewFolder(entry=entry, name=name))
                continue
            batch.provenance.append(
                NewImportedEntry(
                    parent_id=self._parent_id(entry),
                    source_name=entry.name,
                    source_path=entry.path,
                    folder_id=folder_id,
                )
            )
            self.folder_ids[entry.relative] = folder_id
            self.counts.folders_created += 1
        return again

    def _create_documents(self, uow: UnitOfWork, batch: _Batch, keys: dict[str, str]) -> None:
        """Name and create the documents of the batch's new files, with revisions and provenance."""
        pending: list[tuple[_NewFile, str]] = []
        kept: list[_NewFile] = []
        for new in batch.files:
            if new.known_document is not None:
                kept.append(new)
            elif self._skip_orphan(new.entry):
                continue
            else:
                title = self._name(uow, new.entry, _DOCUMENT)
                if title is not None:
                    pending.append((new, title))
        for _ in range(NAME_ATTEMPTS):
            if not pending:
                break
            pending = self._insert_documents(uow, pending, kept, keys)
        for new, _title in pending:
            self._skip(new.entry, SkipReason.NAME_TAKEN, "no free name found")
        batch.files = kept

    def _insert_documents(
        self,
        uow: UnitOfWork,
        pending: list[tuple[_NewFile, str]],
        kept: list[_NewFile],
        keys: dict[str, str],
    ) -> list[tuple[_NewFile, str]]:
        """Create ``pending``; return those whose title was taken, renamed for another try."""
        created = uow.imports.import_documents(
            [
                NewImportedDocument(
                    title=title,
                    folder_id=self._parent_id(new.entry),
                    source_name=new.entry.name,
                    source_path=new.entry.path,
                    storage_key=keys[new.read.content.sha256],
                    sha256=new.read.content.sha256,
                    size_bytes=new.read.content.size_bytes,
                    mime_type=new.read.mime_type,
                )
                for new, title in pending
            ]
        )
        again: list[tuple[_NewFile, str]] = []
        for (new, title), imported in zip(pending, created, strict=True):
            if imported is None:
                name = self._rename_again(new.entry, _DOCUMENT, title)
                if name is not None:
                    again.append((new, name))
                continue
            new.document_id, new.revision_id = imported.document_id, imported.revision_id
            kept.append(new)
            self.counts.documents_created += 1
            if self.defaults:
                set_values(uow, imported.document_id, self.defaults)
        return again

    def _add_revisions(
        self, uow: UnitOfWork, batch: _Batch, keys: dict[str, str]
    ) -> list[uuid.UUID]:
        """Add the new revisions of known documents and make them current.

        Return the revision ids of every file of the batch (new documents got theirs with
        them, in :meth:`_insert_documents`).
        """
        changed = [f for f in batch.files if f.known_document is not None]
        added = uow.revisions.add_many(
            [
                NewRevision(
                    document_id=f.known_document,
                    storage_key=keys[f.read.content.sha256],
                    sha256=f.read.content.sha256,
                    size_bytes=f.read.content.size_bytes,
                    mime_type=f.read.mime_type,
                )
                for f in changed
                if f.known_document is not None
            ]
        )
        for new, revision_id in zip(changed, added, strict=True):
            new.revision_id = revision_id
        uow.documents.set_current_revisions(
            {f.known_document: r for f, r in zip(changed, added, strict=True) if f.known_document}
        )
        self.counts.revisions_added += len(added)
        return [f.revision_id for f in batch.files if f.revision_id is not None]


_T = TypeVar("_T")


def _ahead(
    pool: ThreadPoolExecutor, items: Iterator[_T], unused: Callable[[_T], None]
) -> Generator[_T]:
    """``items``, the next one always being made by ``pool`` while the caller has this one.

    Stopped early (a batch failed), the item made ahead is never used: ``unused`` gets it.
    """
    pending = pool.submit(next, items, None)
    try:
        while (item := pending.result()) is not None:
            pending = pool.submit(next, items, None)
            yield item
    finally:
        leftover = None
        if not pending.cancel():
            try:
                leftover = pending.result()
            except Exception:
                leftover = None  # the error that stopped the import is the one to report
        if leftover is not None:
            unused(leftover)


def _max_chars(kind: str) -> int:
    return FOLDER_NAME_MAX_CHARS if kind == _FOLDER else TITLE_MAX_CHARS


def _defaults(uow: UnitOfWork) -> dict[uuid.UUID, object]:
    """The values every new document gets; refuse a required field that has none."""
    fields = uow.metadata.list_fields()
    unfillable = [f.name for f in fields if f.required and f.default is None]
    if unfillable:
        raise ValidationError(
            f"the tenant's required metadata field(s) {', '.join(map(repr, unfillable))} have "
            "no default: an import cannot fill them; give them a default first"
        )
    return {f.id: f.default for f in fields if f.default is not None}


def import_tree(
    engine: Engine,
    source: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    *,
    tenant: str,
    user_id: uuid.UUID,
    store: BlobStore,
    into: uuid.UUID | None = None,
    name_policy: NamePolicy = NamePolicy.RENAME,
    batch_files: int = DEFAULT_BATCH_FILES,
    progress: Callable[[ImportProgress], None] | None = None,
    settings: Settings | None = None,
) -> ImportReport:
    """Import the folder (or file) ``source`` into ``tenant``, under folder ``into``.

    The source folder becomes a folder of that name in ``into`` (top level if ``None``), with
    its folders and files below it; ``user_id`` is recorded as their creator. Blobs go to
    ``store``. ``name_policy`` decides what happens to names that collide or that the rules
    refuse (:mod:`dms.importing.names`). ``progress`` is called after each committed batch.

    Bad input (a source that is not there, an unknown tenant or folder, a tenant with a
    required field that has no default) raises a :class:`~dms.errors.DmsError` before
    anything is written. Re-running an interrupted or finished import resumes it.
    """
    root = source_root(source)
    tenancy.validate_slug(tenant)
    if not isinstance(batch_files, int) or isinstance(batch_files, bool) or batch_files < 1:
        raise ValidationError(f"batch_files must be a positive int, not {batch_files!r}")
    if not isinstance(user_id, uuid.UUID) or not isinstance(into, uuid.UUID | None):
        raise ValidationError(f"user_id and into must be uuid.UUID, not {user_id!r}, {into!r}")
    try:
        policy = NamePolicy(name_policy)
    except ValueError:
        raise ValidationError(
            f"name_policy must be 'rename' or 'refuse', not {name_policy!r}"
        ) from None
    return _Importer(
        engine,
        root,
        tenant=tenant,
        user_id=user_id,
        store=store,
        into=into,
        policy=policy,
        batch_files=batch_files,
        progress=progress,
        settings=settings,
    ).run()
