"""What every blob store does: the :class:`BlobStore` protocol, and the values it passes.

A store keeps bytes under storage keys (:mod:`dms.storage.keys`); ``dms`` keeps what it knows
about them (key, SHA-256, size, MIME type) in the database. Everything in ``dms`` that touches
bytes is typed to :class:`BlobStore`: the import, the processing handlers, the release of
blobs, the trash, the sweep. :class:`~dms.storage.LocalBlobStore` keeps them in a directory,
:class:`~dms.storage.S3BlobStore` in an S3 bucket; another backend implements these methods.

Large files are never held in memory whole: :meth:`BlobStore.stage` copies a source into a
local staging file while hashing it, :meth:`BlobStore.put_many` moves or uploads that file, and
:meth:`BlobStore.stream` reads a blob back in chunks.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO, Protocol

from dms.errors import ValidationError

#: Read and write files in chunks of this many bytes.
CHUNK_BYTES = 1 << 20
#: The staging files older than this are leftovers of a writer that died: an import stages a
#: file and moves it into place within seconds.
STAGING_GRACE = timedelta(hours=1)

_counter = itertools.count()


@dataclass(frozen=True, kw_only=True)
class StoredBlob:
    """What :meth:`BlobStore.put` wrote."""

    storage_key: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True, kw_only=True)
class StoredObject:
    """One blob as a store lists it (:meth:`BlobStore.objects`)."""

    storage_key: str
    size_bytes: int
    modified: datetime


@dataclass(frozen=True, kw_only=True)
class Content:
    """Bytes on their way into a store: in memory, or staged in a local file.

    Large files are staged (:meth:`BlobStore.stage`) so that they are read once and never held
    in memory whole.
    """

    sha256: str
    size_bytes: int
    data: bytes | None = None
    staged: Path | None = None


class BlobStore(Protocol):
    """Bytes by storage key. Keys are checked by :func:`~dms.storage.keys.check_key`.

    Every method raises :class:`~dms.errors.ValidationError` for a key no store accepts, and
    :class:`~dms.errors.StorageError` when the store itself fails (unreachable, refused).
    """

    @property
    def location(self) -> str:
        """Where the blobs are, as an operator names it: a directory, ``s3://bucket/prefix``."""
        ...

    def exists(self, storage_key: str) -> bool:
        """Whether a blob is stored under ``storage_key``."""
        ...

    def get(self, storage_key: str) -> bytes:
        """The content stored under ``storage_key``, or :class:`~dms.errors.NotFound`."""
        ...

    def stream(self, storage_key: str) -> Iterator[bytes]:
        """The content in chunks of at most :data:`CHUNK_BYTES`; ``NotFound`` before the first."""
        ...

    def put(self, storage_key: str, content: bytes | bytearray | memoryview) -> StoredBlob:
        """Write ``content`` under ``storage_key`` atomically (no reader sees half of it)."""
        ...

    def put_many(self, blobs: Sequence[tuple[str, Content]]) -> None:
        """Write each content under its key; a staged content's file is gone afterwards."""
        ...

    def delete(self, storage_key: str) -> bool:
        """Remove the blob of ``storage_key``; return whether there was one."""
        ...

    def objects(self, prefix: str) -> Iterator[StoredObject]:
        """The blobs whose keys start with ``prefix`` (``""``: all), in no particular order."""
        ...

    def namespaces(self) -> list[str]:
        """The first segments of the stored keys, sorted (tenants, for content addresses)."""
        ...

    def stage(self, source: BinaryIO) -> Content:
        """Copy ``source`` into a local staging file, hashing it on the way."""
        ...

    def discard(self, content: Content) -> None:
        """Remove the staging file of ``content``, if it has one."""
        ...

    def sweep_staging(self, *, older_than: timedelta = STAGING_GRACE, dry_run: bool = False) -> int:
        """Remove staging files older than ``older_than`` (a writer died); return how many.

        ``dry_run``: only count them.
        """
        ...


def put_one(
    store: BlobStore, storage_key: str, content: bytes | bytearray | memoryview
) -> StoredBlob:
    """:meth:`BlobStore.put` for any store: ``content`` checked, hashed, put as a batch of one."""
    stored = in_memory(content)
    store.put_many([(storage_key, stored)])
    return StoredBlob(storage_key=storage_key, sha256=stored.sha256, size_bytes=stored.size_bytes)


def in_memory(content: object) -> Content:
    """``content`` (any bytes-like value) as a :class:`Content`, or :class:`ValidationError`."""
    if not isinstance(content, bytes | bytearray | memoryview):
        raise ValidationError(f"content must be bytes, not {type(content).__name__}")
    data = bytes(content)
    return Content(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), data=data)


def stage_into(directory: Path, source: BinaryIO) -> Content:
    """Copy ``source`` into a new file of ``directory``, hashing it on the way."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / temporary_name()
    digest = hashlib.sha256()
    size = 0
    with path.open("xb") as target:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
            target.write(chunk)
            size += len(chunk)
    return Content(sha256=digest.hexdigest(), size_bytes=size, staged=path)


def sweep_directory(directory: Path, older_than: timedelta, *, dry_run: bool = False) -> int:
    """Remove (``dry_run``: count) the files of ``directory`` older than ``older_than``."""
    cutoff = (datetime.now(timezone.utc) - older_than).timestamp()
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                if not dry_run:
                    os.unlink(entry.path)
                removed += 1
        except FileNotFoundError:
            continue  # its writer moved it into place meanwhile
    return removed


def temporary_name() -> str:
    """A name no other process or thread picks, hidden (no key is spelled with a dot first)."""
    return f".{os.getpid()}.{next(_counter)}.{secrets.token_hex(4)}.tmp"
