"""What each entry of an import becomes: found, created and named, unchanged, revised or skipped.

:class:`TreePlan` holds what one run knows of the tree (where each source folder went, which
were skipped, the names already taken in each folder) and decides a batch before its first
write: :meth:`~TreePlan.plan_folders` and :meth:`~TreePlan.classify_files` fill a
:class:`Batch`. It reads the import provenance and the sibling names through the batch's unit
of work and writes nothing; what it decides is reported (renamed, skipped) in the run's
:class:`~.report.ImportReport`. The writes are :mod:`.writes`'.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from dms.domain.model import ImportedEntry
from dms.domain.validation import FOLDER_NAME_MAX_CHARS, TITLE_MAX_CHARS
from dms.repositories.imports import ImportRepository, NewImportedEntry
from dms.schema.tenant import MAX_FOLDER_DEPTH
from dms.uow import UnitOfWork

from .files import ReadFile
from .names import NamePolicy, SiblingNames, readable_name
from .report import Action, ImportReport, ReportEntry, SkipReason, shown_path
from .walk import EntryKind, SourceEntry

FOLDER = "folder"
DOCUMENT = "document"


@dataclass(kw_only=True)
class Item:
    """One source entry of a batch, with what reading it gave."""

    entry: SourceEntry
    read: ReadFile | None = None
    error: str | None = None


@dataclass(kw_only=True)
class NewFolder:
    """A folder to create, under the name chosen for it."""

    entry: SourceEntry
    name: str


@dataclass(kw_only=True)
class NewFile:
    """A file to import: a new document, or a new revision of the one imported from it."""

    entry: SourceEntry
    read: ReadFile
    #: The document imported from this file earlier (its content changed since), if any.
    known_document: uuid.UUID | None = None
    #: The document that gets the revision: the known one, or the one created for it.
    document_id: uuid.UUID | None = None
    #: The revision of the file, once added.
    revision_id: uuid.UUID | None = None


@dataclass(kw_only=True)
class Batch:
    """What one batch will write, planned before its first write."""

    folders: list[NewFolder] = field(default_factory=list)
    files: list[NewFile] = field(default_factory=list)
    provenance: list[NewImportedEntry] = field(default_factory=list)


class Provenance:
    """The import provenance of some folders' entries, read per folder when first needed."""

    def __init__(self, imports: ImportRepository, parents: set[uuid.UUID | None]) -> None:
        """Read the entries imported into ``parents`` in one query."""
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


class TreePlan:
    """One run's decisions about the source tree, batch after batch.

    Not thread-safe, except :meth:`parent_skipped`, which the reading thread asks so as to
    leave the files of skipped folders unread (a set lookup; a late answer only reads a file
    that is then skipped).
    """

    def __init__(self, *, report: ImportReport, into: uuid.UUID | None, policy: NamePolicy) -> None:
        """Plan an import into folder ``into`` (top level if ``None``), reported in ``report``."""
        self.report, self.counts = report, report.counts
        self.into, self.policy = into, policy
        #: Levels above the import's root folder: the tree may go that much less deep.
        self.into_depth = 0
        # Folder of the tree (relative path) -> its id, once created or found.
        self._folder_ids: dict[bytes, uuid.UUID] = {}
        # Folders found already imported: their contents may hold earlier imports.
        self._found: set[bytes] = set()
        self._skipped_folders: set[bytes] = set()
        self._siblings: dict[tuple[str, bytes | None], SiblingNames] = {}

    # --- where entries go ------------------------------------------------------------------

    def parent_id(self, entry: SourceEntry) -> uuid.UUID | None:
        """The folder ``entry`` goes into."""
        return self.into if entry.parent is None else self._folder_ids[entry.parent]

    def parent_skipped(self, entry: SourceEntry) -> bool:
        """Whether the folder of ``entry`` was left out of the import."""
        return entry.parent is not None and entry.parent in self._skipped_folders

    def folder_created(self, entry: SourceEntry, folder_id: uuid.UUID) -> None:
        """Note that the folder of ``entry`` was created as ``folder_id``."""
        self._folder_ids[entry.relative] = folder_id
        self.counts.folders_created += 1

    def known(self, uow: UnitOfWork, items: list[Item]) -> Provenance:
        """Provenance of the entries whose folder existed before this batch, in one query.

        Folders found during the batch have theirs read when first asked (:meth:`_lookup`).
        """
        parents: set[uuid.UUID | None] = set()
        for item in items:
            if item.entry.parent is None:
                parents.add(self.into)
            elif item.entry.parent in self._found:
                parents.add(self._folder_ids[item.entry.parent])
        return Provenance(uow.imports, parents)

    def _lookup(self, known: Provenance, entry: SourceEntry) -> ImportedEntry | None:
        if entry.parent is not None and entry.parent not in self._found:
            return None  # a folder created by this run holds nothing imported earlier
        return known.get(self.parent_id(entry), entry.name)

    # --- deciding a batch ------------------------------------------------------------------

    def plan_folders(
        self, uow: UnitOfWork, items: list[Item], known: Provenance, batch: Batch
    ) -> None:
        """Decide each folder of the batch: found, to create (named), or skipped."""
        for item in items:
            entry = item.entry
            if entry.kind is not EntryKind.FOLDER or self.skip_orphan(entry):
                continue
            if self.into_depth + entry.depth > MAX_FOLDER_DEPTH:
                reason = f"deeper than the {MAX_FOLDER_DEPTH} levels folders can have"
                self.skip(entry, SkipReason.TOO_DEEP, reason)
                continue
            earlier = self._lookup(known, entry)
            if earlier is not None and earlier.folder_id is not None:
                self._reuse_folder(entry, earlier, earlier.folder_id)
                continue
            name = self.name(uow, entry, FOLDER)  # None: skipped, and so is what is below
            if name is not None:
                batch.folders.append(NewFolder(entry=entry, name=name))

    def _reuse_folder(
        self, entry: SourceEntry, earlier: ImportedEntry, folder_id: uuid.UUID
    ) -> None:
        if earlier.in_trash:
            self.skip(entry, SkipReason.IN_TRASH, "imported before, now in the trash")
            return
        self._folder_ids[entry.relative] = folder_id
        self._found.add(entry.relative)
        self.counts.folders_found += 1

    def classify_files(self, items: list[Item], known: Provenance, batch: Batch) -> None:
        """Decide each file: unchanged, a new revision of a known document, new, or skipped."""
        for item in items:
            entry = item.entry
            if entry.kind is EntryKind.SKIPPED:
                self._skip_entry(item)
                continue
            if entry.kind is not EntryKind.FILE or self.skip_orphan(entry):
                continue
            if item.read is None:
                self.skip(entry, SkipReason.UNREADABLE, f"cannot read it: {item.error}")
                continue
            earlier = self._lookup(known, entry)
            if earlier is None or earlier.document_id is None:
                batch.files.append(NewFile(entry=entry, read=item.read))
            elif earlier.in_trash:
                self.skip(entry, SkipReason.IN_TRASH, "imported before, now in the trash")
            elif earlier.sha256 == item.read.content.sha256:
                self.counts.unchanged += 1
            else:
                batch.files.append(
                    NewFile(
                        entry=entry,
                        read=item.read,
                        known_document=earlier.document_id,
                        document_id=earlier.document_id,
                    )
                )

    # --- skipping ----------------------------------------------------------------------------

    def _skip_entry(self, item: Item) -> None:
        entry = item.entry
        if self.skip_orphan(entry):
            return
        reason = entry.reason or "skipped"
        kind = SkipReason.UNREADABLE if reason.startswith("cannot") else SkipReason.NOT_A_FILE
        self.skip(entry, kind, reason)

    def skip_orphan(self, entry: SourceEntry) -> bool:
        """Skip (and report) an entry whose folder was not imported; say whether it was."""
        if not self.parent_skipped(entry):
            return False
        parent = shown_path(entry.parent or b"")
        self.skip(entry, SkipReason.PARENT_SKIPPED, f"its folder {parent} was not imported")
        return True

    def skip(self, entry: SourceEntry, why: SkipReason, reason: str) -> None:
        """Leave ``entry`` out of the import (and what is below it, for a folder); report it."""
        if entry.kind is EntryKind.FOLDER:
            self._skipped_folders.add(entry.relative)
        listing = entry.kind is EntryKind.SKIPPED and reason.startswith("cannot list")
        kind = FOLDER if entry.kind is EntryKind.FOLDER or listing else "file"
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

    def name(self, uow: UnitOfWork, entry: SourceEntry, kind: str) -> str | None:
        """The title of a new folder or document, or ``None`` (skipped and reported)."""
        readable = readable_name(entry.name)
        if readable.changes and self.policy is NamePolicy.REFUSE:
            self.skip(entry, SkipReason.NAME_REFUSED, "; ".join(readable.changes))
            return None
        siblings = self._siblings_of(uow, kind, entry)
        name, reasons = readable.text, list(readable.changes)
        if not siblings.is_free(name):
            taken = f"a {kind} named {name!r} is already in the folder (ignoring case)"
            if self.policy is NamePolicy.REFUSE:
                self.skip(entry, SkipReason.NAME_TAKEN, taken)
                return None
            name = siblings.free_variant(name, max_chars=_max_chars(kind), is_file=kind == DOCUMENT)
            reasons.append(taken)
        siblings.take(name)
        if reasons:
            self._renamed(entry, name, "; ".join(reasons))
        return name

    def rename_again(self, entry: SourceEntry, kind: str, taken: str) -> str | None:
        """A new name after the database refused ``taken`` (a concurrent writer took it)."""
        siblings = self._siblings[(kind, entry.parent)]
        siblings.take(taken)
        reason = f"a {kind} named {taken!r} appeared in the folder meanwhile (ignoring case)"
        if self.policy is NamePolicy.REFUSE:
            self.skip(entry, SkipReason.NAME_TAKEN, reason)
            return None
        name = siblings.free_variant(taken, max_chars=_max_chars(kind), is_file=kind == DOCUMENT)
        siblings.take(name)
        self._renamed(entry, name, reason)
        return name

    def _siblings_of(self, uow: UnitOfWork, kind: str, entry: SourceEntry) -> SiblingNames:
        key = (kind, entry.parent)
        names = self._siblings.get(key)
        if names is None:
            names = SiblingNames()
            if entry.parent is None or entry.parent in self._found:
                names.taken.update(n.lower() for n in self._existing_names(uow, kind, entry))
            self._siblings[key] = names
        return names

    def _existing_names(self, uow: UnitOfWork, kind: str, entry: SourceEntry) -> list[str]:
        parent_id = self.parent_id(entry)
        if kind == FOLDER:
            return [folder.name for folder in uow.folders.children(parent_id)]
        return uow.documents.titles_in(parent_id)

    def _renamed(self, entry: SourceEntry, title: str, reason: str) -> None:
        kind = FOLDER if entry.kind is EntryKind.FOLDER else "file"
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


def _max_chars(kind: str) -> int:
    return FOLDER_NAME_MAX_CHARS if kind == FOLDER else TITLE_MAX_CHARS
