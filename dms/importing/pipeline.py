"""The reading side of an import: the tree read in batches, a stage ahead of the database.

:func:`read_batches` reads and hashes the source's files into batches (:class:`ReadBatch`);
:func:`ahead` runs any stage of them on a thread of its own, one item ahead of its consumer.
The importer chains two such stages (reading, then writing the missing blobs ahead of the
batch's transaction) in front of the database writes, so that reading and hashing, the file
system's flushes and the server's work overlap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from dms.storage import BlobStore

from .files import ReadFile, read_file
from .names import readable_name
from .plan import Item
from .report import Counts, Timings
from .walk import EntryKind, SourceEntry

#: A batch also ends once it holds this many bytes in memory.
BATCH_MEMORY_BYTES = 32 * 1024 * 1024

_T = TypeVar("_T")


@dataclass(kw_only=True)
class ReadBatch:
    """A batch of source entries, read, and the keys of the blobs written ahead for it."""

    items: list[Item]
    written_ahead: frozenset[str] = frozenset()

    def discard(self, store: BlobStore) -> None:
        """Remove the staging files the batch still holds (the imported ones are gone already)."""
        for item in self.items:
            if item.read is not None:
                store.discard(item.read.content)


def read_batches(
    entries: Iterable[SourceEntry],
    *,
    store: BlobStore,
    batch_files: int,
    unwanted: Callable[[SourceEntry], bool],
    counts: Counts,
    timings: Timings,
) -> Iterator[ReadBatch]:
    """``entries`` in batches of ``batch_files`` files, each file read and hashed.

    A batch ends early once it holds :data:`BATCH_MEMORY_BYTES`. A file is left unread when
    ``unwanted`` (its folder was left out of the import).
    """
    batch: list[Item] = []
    files = held = 0
    for entry in entries:
        item = Item(entry=entry)
        if entry.kind is EntryKind.FILE and not unwanted(entry):
            started = time.perf_counter()
            item.read, item.error = _read(entry, store)
            timings.reading_and_hashing += time.perf_counter() - started
        batch.append(item)
        if entry.kind is EntryKind.FILE:
            files += 1
        if item.read is not None:
            counts.bytes_read += item.read.content.size_bytes
            held += len(item.read.content.data or b"")
        if files >= batch_files or held >= BATCH_MEMORY_BYTES:
            yield ReadBatch(items=batch)
            batch, files, held = [], 0, 0
    if batch:
        yield ReadBatch(items=batch)


def _read(entry: SourceEntry, store: BlobStore) -> tuple[ReadFile | None, str | None]:
    try:
        return read_file(entry.path, readable_name(entry.name).text, store), None
    except OSError as exc:
        return None, exc.strerror or str(exc)


def ahead(
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
