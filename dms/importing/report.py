r"""The report of an import: what was created, what was renamed or skipped and why, how fast.

Everything in it is plain data (strings, numbers, ids) so that ``dms import --json`` prints it
as it is. Source paths are shown as text: bytes that are not UTF-8 appear as ``\xNN``
escapes (the raw bytes are in the import provenance).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field


class Action(str, enum.Enum):
    """What happened to a reported entry."""

    RENAMED = "renamed"
    SKIPPED = "skipped"


class SkipReason(str, enum.Enum):
    """Why an entry was not imported; :attr:`is_failure` tells the ones an operator must see."""

    NOT_A_FILE = "not_a_file"
    """A symbolic link, device, FIFO or socket: never imported, by design."""
    UNREADABLE = "unreadable"
    NAME_REFUSED = "name_refused"
    NAME_TAKEN = "name_taken"
    TOO_DEEP = "too_deep"
    IN_TRASH = "in_trash"
    PARENT_SKIPPED = "parent_skipped"

    @property
    def is_failure(self) -> bool:
        """Whether a file that could be imported was not (``dms import`` then exits 1)."""
        return self is not SkipReason.NOT_A_FILE


@dataclass(frozen=True, kw_only=True)
class ReportEntry:
    """A folder or file that was renamed or skipped."""

    path: str
    kind: str
    action: Action
    reason: str
    title: str | None = None
    skip_reason: SkipReason | None = None


@dataclass(kw_only=True)
class Counts:
    """Running totals of an import."""

    folders_created: int = 0
    folders_found: int = 0
    documents_created: int = 0
    revisions_added: int = 0
    unchanged: int = 0
    renamed: int = 0
    skipped: int = 0
    bytes_read: int = 0
    blobs_written: int = 0
    blobs_already_stored: int = 0
    jobs_enqueued: int = 0
    batches: int = 0

    @property
    def files_done(self) -> int:
        """Files dealt with so far: imported, re-imported, unchanged or skipped."""
        return self.documents_created + self.revisions_added + self.unchanged + self.skipped


@dataclass(kw_only=True)
class Timings:
    """Seconds spent, by kind of work (wall clock).

    The work overlaps, a batch apart: while the import runs the database statements of one
    batch (``database``), one thread writes the missing blobs of the next batch ahead of its
    transaction and another reads and hashes the batch after that (``reading_and_hashing``,
    with walking the tree). ``blob_writes`` is the blob writing ahead plus, within each batch's
    transaction, the check that its blobs are there once claimed (writing any a release
    deleted meanwhile, and large staged files). ``waiting_for_reads`` is what the import
    waited for its next batch (read, blobs written ahead), ``waiting_for_blobs`` what it waited
    for the check: ``database`` and the two waits make ``total``, but for the first
    preparations.
    """

    reading_and_hashing: float = 0.0
    blob_writes: float = 0.0
    database: float = 0.0
    waiting_for_reads: float = 0.0
    waiting_for_blobs: float = 0.0
    total: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ImportProgress:
    """Where a running import is, after each committed batch."""

    files_done: int
    bytes_read: int
    elapsed_seconds: float


@dataclass(kw_only=True)
class ImportReport:
    """The outcome of :func:`dms.importing.import_tree`."""

    tenant: str
    source: str
    into: uuid.UUID | None
    name_policy: str
    counts: Counts = field(default_factory=Counts)
    timings: Timings = field(default_factory=Timings)
    renamed: list[ReportEntry] = field(default_factory=list)
    skipped: list[ReportEntry] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every file that could be imported was (links and devices aside)."""
        return not any(
            entry.skip_reason is not None and entry.skip_reason.is_failure for entry in self.skipped
        )

    @property
    def files_per_second(self) -> float:
        """Files dealt with per second of the whole import."""
        total = self.timings.total
        return self.counts.files_done / total if total > 0 else 0.0

    def summary(self) -> str:
        """One paragraph for people."""
        c, t = self.counts, self.timings
        return (
            f"imported {c.documents_created} file(s) into {c.folders_created} new folder(s) "
            f"of tenant {self.tenant}; {c.revisions_added} changed file(s) got a new revision, "
            f"{c.unchanged} were already imported; {c.renamed} renamed, {c.skipped} skipped.\n"
            f"{c.blobs_written} blob(s) written, {c.blobs_already_stored} already stored; "
            f"{c.jobs_enqueued} job(s) enqueued (verification, text extraction).\n"
            f"{t.total:.1f} s ({self.files_per_second:.0f} files/s): database "
            f"{t.database:.1f} s; alongside it reading and hashing {t.reading_and_hashing:.1f} s "
            f"(waited for {t.waiting_for_reads:.1f} s) and blob writes {t.blob_writes:.1f} s "
            f"(waited for {t.waiting_for_blobs:.1f} s)."
        )


def shown_path(raw: bytes) -> str:
    r"""``raw`` as text: UTF-8, with other bytes as ``\xNN`` escapes."""
    return raw.decode("utf-8", errors="backslashreplace")
