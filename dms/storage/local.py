"""Blobs as files under one directory: :class:`LocalBlobStore`.

One file per storage key, at the path :func:`~dms.storage.keys.segment_path` spells; files are
written next to their target and renamed into place, so a reader never sees half a file, and
(``durable``) flushed with their directory before the rename is trusted. Staged files wait in
``<root>/.staging``, on the same file system, so that publishing one is a rename.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO, TypeVar

from dms.errors import NotFound, ValidationError
from dms.storage.keys import check_prefix, key_of_names, spelled
from dms.storage.store import (
    CHUNK_BYTES,
    STAGING_GRACE,
    Content,
    StoredBlob,
    StoredObject,
    put_one,
    stage_into,
    sweep_directory,
    temporary_name,
)

#: Where files are written before they get their key's name; no key is spelled so (a spelled
#: segment never starts with a dot).
STAGING_DIR = ".staging"
#: Threads that write and flush files at once: their waits on the device overlap, and the
#: file system commits their flushes together.
WRITER_THREADS = 16

_Item = TypeVar("_Item")


class LocalBlobStore:
    """Blobs as files under ``root``, one file per storage key.

    ``durable`` (the default) flushes every file to disk before it gets its key's name, and the
    directory after, so that a blob whose revision committed survives a power cut. Turn it off
    only for throw-away stores (tests, demos).
    """

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        """Use ``root`` (created on first write); :class:`ValidationError` if it is no path."""
        if not isinstance(root, str | os.PathLike) or isinstance(root, bytes):
            raise ValidationError(f"the store's root must be a path, not {root!r:.80}")
        if not isinstance(durable, bool):
            raise ValidationError(f"durable must be a bool, not {durable!r:.80}")
        self.root = Path(root)
        self.durable = durable

    @property
    def location(self) -> str:
        """The store's directory."""
        return str(self.root)

    def path_of(self, storage_key: str) -> Path:
        """The file that holds (or would hold) the blob of ``storage_key``."""
        return self.root.joinpath(*spelled(storage_key))

    def exists(self, storage_key: str) -> bool:
        """Whether a blob is stored under ``storage_key``."""
        return self.path_of(storage_key).is_file()

    def get(self, storage_key: str) -> bytes:
        """The content stored under ``storage_key``, or :class:`NotFound`."""
        try:
            return self.path_of(storage_key).read_bytes()
        except FileNotFoundError:
            raise self._not_found(storage_key) from None

    def stream(self, storage_key: str) -> Iterator[bytes]:
        """The content in chunks; :class:`NotFound` at once if there is none."""
        try:
            source = self.path_of(storage_key).open("rb")
        except FileNotFoundError:
            raise self._not_found(storage_key) from None
        return _chunks(source)

    def put(self, storage_key: str, content: bytes | bytearray | memoryview) -> StoredBlob:
        """Write ``content`` under ``storage_key`` atomically (a reader never sees half a file)."""
        return put_one(self, storage_key, content)

    def put_many(self, blobs: Sequence[tuple[str, Content]]) -> None:
        """Write each content under its key, atomically and (if durable) flushed to disk.

        A staged content is moved into place, and its staging file is gone afterwards. Files
        are written by several threads at once: creating and flushing a file mostly waits for
        the file system, and those waits overlap.
        """
        targets = [(self.path_of(key), content) for key, content in blobs]
        for directory in {path.parent for path, _ in targets}:
            directory.mkdir(parents=True, exist_ok=True)
        _each(lambda target: self._publish(*target), targets)
        if self.durable:
            _each(_flush_file, list({path.parent for path, _ in targets}))

    def delete(self, storage_key: str) -> bool:
        """Remove the blob of ``storage_key``; return whether there was one."""
        try:
            self.path_of(storage_key).unlink()
        except FileNotFoundError:
            return False
        return True

    def objects(self, prefix: str) -> Iterator[StoredObject]:
        """The blobs whose keys start with ``prefix``: a walk of the directory it names."""
        top = self.path_of(check_prefix(prefix)[:-1]) if prefix else self.root
        for directory, subdirectories, files in os.walk(top):
            subdirectories[:] = [d for d in subdirectories if not d.startswith(".")]
            names = Path(directory).relative_to(self.root).parts
            for name in files:
                key = key_of_names([*names, name])
                if key is None:
                    continue  # a temporary file, or not written by a store
                try:
                    status = os.stat(os.path.join(directory, name))
                except FileNotFoundError:
                    continue  # deleted since the walk saw it
                yield StoredObject(
                    storage_key=key,
                    size_bytes=status.st_size,
                    modified=datetime.fromtimestamp(status.st_mtime, timezone.utc),
                )

    def namespaces(self) -> list[str]:
        """The keys' first segments: the root's directories that a key spells."""
        try:
            entries = [entry for entry in os.scandir(self.root) if entry.is_dir()]
        except FileNotFoundError:
            return []
        return sorted(key for entry in entries if (key := key_of_names([entry.name])))

    def stage(self, source: BinaryIO) -> Content:
        """Copy ``source`` into a staging file of the store, hashing it on the way."""
        return stage_into(self.root / STAGING_DIR, source)

    def discard(self, content: Content) -> None:
        """Remove the staging file of ``content``, if it has one."""
        if content.staged is not None:
            content.staged.unlink(missing_ok=True)

    def sweep_staging(self, *, older_than: timedelta = STAGING_GRACE, dry_run: bool = False) -> int:
        """Remove (or count) staging files older than ``older_than`` (their writer died)."""
        return sweep_directory(self.root / STAGING_DIR, older_than, dry_run=dry_run)

    def _not_found(self, storage_key: str) -> NotFound:
        return NotFound(f"no blob stored under {storage_key!r} in {self.root}")

    def _publish(self, path: Path, content: Content) -> None:
        # Written next to its target, so that the rename that publishes it stays on one file
        # system; a name starting with a dot is never a spelled key segment.
        temporary = path.parent / temporary_name()
        if content.staged is not None:
            os.replace(content.staged, temporary)
            if self.durable:
                _flush_file(temporary)
        else:
            with temporary.open("xb") as target:
                target.write(content.data or b"")
                if self.durable:
                    target.flush()
                    os.fsync(target.fileno())
        os.replace(temporary, path)


def _chunks(source: BinaryIO) -> Iterator[bytes]:
    with source:
        while chunk := source.read(CHUNK_BYTES):
            yield chunk


def _flush_file(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _each(action: Callable[[_Item], object], items: Sequence[_Item]) -> None:
    """Run ``action`` on every item: several threads for several items (their waits overlap)."""
    if len(items) <= 1:
        for item in items:
            action(item)
        return
    with ThreadPoolExecutor(min(WRITER_THREADS, len(items))) as pool:
        list(pool.map(action, items))
