"""File content by storage key: a local-directory blob store, and content-addressed keys.

``dms`` stores metadata about file revisions (``storage_key``, ``sha256``, size, MIME type);
the bytes live elsewhere. :class:`LocalBlobStore` keeps them under one directory: it is what the
seed and ``dms import`` write and what the revision-verification job reads. A deployment on an
object store puts one behind the same methods.

Keys. Any key made of ``/``-separated segments is accepted, whatever characters a real path
has (spaces, ``+``, ``@``, non-ASCII letters, ``%``, even a leading dot), except what could
escape the store or cannot be stored at all: an empty segment (so no absolute path), ``.`` and
``..``, NUL and lone surrogates. On disk a segment is spelled by :func:`segment_path`, a
one-to-one mapping (percent-encoding of the few characters a file name should not carry), so
two keys never share a file and nothing is lost.

Content addressing. :func:`content_key` derives a key from a SHA-256: identical bytes of one
tenant are stored once and shared by every revision that has them (:mod:`dms.blobs` keeps the
reference-safe bookkeeping in the tenant's schema).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dms.errors import NotFound, ValidationError
from dms.tenancy import validate_slug

#: Longest key accepted (characters).
MAX_KEY_CHARS = 1024
#: Most segments in a key.
MAX_KEY_SEGMENTS = 32
#: Longest file name written (bytes): NAME_MAX of common Linux file systems.
MAX_SEGMENT_BYTES = 255
#: Where files are written before they get their key's name; no key maps here (see
#: :func:`segment_path`: a mapped segment never starts with a dot).
STAGING_DIR = ".staging"
#: Threads that write and flush files at once: their waits on the device overlap, and the
#: file system commits their flushes together.
WRITER_THREADS = 16
#: Read and write files in chunks of this many bytes.
CHUNK_BYTES = 1 << 20

_SHA256 = re.compile(r"[0-9a-f]{64}")
# Kept as they are in a file name; everything else (controls, '%', '\\', ':', '*', '?', '"',
# '<', '>', '|', and a leading '.') is percent-encoded. Non-ASCII characters stay readable.
_VERBATIM = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$&'()+,-.;=@[]^_`{}~"
)
#: Non-ASCII characters from here on are kept (below it: C1 control characters).
_FIRST_KEPT_NON_ASCII = 0xA0
_counter = itertools.count()


@dataclass(frozen=True, kw_only=True)
class StoredBlob:
    """What :meth:`LocalBlobStore.put` wrote."""

    storage_key: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True, kw_only=True)
class Content:
    """Bytes on their way into a store: in memory, or staged in a file of the store.

    Large files are staged (:meth:`LocalBlobStore.stage`) so that they are read once and never
    held in memory whole.
    """

    sha256: str
    size_bytes: int
    data: bytes | None = None
    staged: Path | None = None


def content_key(tenant: str, sha256: str) -> str:
    """The key of the blob with this SHA-256 in ``tenant``'s content-addressed space.

    One space per tenant, not one for all: a tenant's blobs are released by reference counts
    kept in its own schema (in one transaction with its revisions, on whichever node holds the
    schema), a tenant's files can be removed as a whole, and no tenant can learn by
    deduplication whether another one holds some file. The price is one copy per tenant of a
    file that several tenants store.
    """
    validate_slug(tenant)
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ValidationError(f"sha256 must be 64 lowercase hex digits, not {sha256!r}")
    return f"{tenant}/sha256/{sha256[:2]}/{sha256}"


def segment_path(segment: str) -> str:
    """The file name of one key segment: one-to-one, never hidden, at most 255 bytes.

    Characters outside a safe set, ``%`` itself and a leading dot become ``%XX`` (UTF-8 bytes).
    A name that would exceed :data:`MAX_SEGMENT_BYTES` keeps a readable start and ends in
    ``%~`` and the SHA-256 of the segment: ``%`` is never followed by ``~`` otherwise.
    """
    if (
        len(segment) <= MAX_SEGMENT_BYTES
        and _VERBATIM.issuperset(segment)  # ASCII only: as many bytes as characters
        and not segment.startswith(".")
    ):
        return segment  # the common case (every content-addressed key), without a loop
    pieces = [_mapped_char(char, index) for index, char in enumerate(segment)]
    mapped = "".join(pieces)
    if len(mapped.encode()) <= MAX_SEGMENT_BYTES:
        return mapped
    suffix = "%~" + hashlib.sha256(segment.encode()).hexdigest()
    budget = MAX_SEGMENT_BYTES - len(suffix)
    kept: list[str] = []
    for piece in pieces:  # whole pieces only: an escape is never cut in two
        budget -= len(piece.encode())
        if budget < 0:
            break
        kept.append(piece)
    return "".join(kept) + suffix


def _mapped_char(char: str, index: int) -> str:
    if (char in _VERBATIM or ord(char) >= _FIRST_KEPT_NON_ASCII) and not (
        index == 0 and char == "."
    ):
        return char
    return "".join(f"%{byte:02X}" for byte in char.encode())


def check_key(storage_key: object) -> str:
    """Return ``storage_key`` if a store accepts it, else raise :class:`ValidationError`."""
    if not isinstance(storage_key, str) or not storage_key or len(storage_key) > MAX_KEY_CHARS:
        raise ValidationError(
            f"a storage key is a string of 1 to {MAX_KEY_CHARS} characters, not {storage_key!r:.80}"
        )
    segments = storage_key.split("/")
    if len(segments) > MAX_KEY_SEGMENTS or any(s in ("", ".", "..") for s in segments):
        raise ValidationError(
            f"invalid storage key {storage_key!r}: segments must be non-empty and not '.' or "
            f"'..', at most {MAX_KEY_SEGMENTS} of them"
        )
    if "\x00" in storage_key:
        raise ValidationError(f"invalid storage key {storage_key!r}: it contains NUL")
    try:
        storage_key.encode()
    except UnicodeEncodeError:
        raise ValidationError(
            f"invalid storage key {storage_key!r}: it contains a lone surrogate"
        ) from None
    return storage_key


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

    def path_of(self, storage_key: str) -> Path:
        """The file that holds (or would hold) the blob of ``storage_key``."""
        check_key(storage_key)
        return self.root.joinpath(*(segment_path(s) for s in storage_key.split("/")))

    def exists(self, storage_key: str) -> bool:
        """Whether a blob is stored under ``storage_key``."""
        return self.path_of(storage_key).is_file()

    def read(self, storage_key: str) -> bytes:
        """The content stored under ``storage_key``, or :class:`NotFound`."""
        try:
            return self.path_of(storage_key).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no blob stored under {storage_key!r} in {self.root}") from None

    def put(self, storage_key: str, content: bytes | bytearray | memoryview) -> StoredBlob:
        """Write ``content`` under ``storage_key`` atomically (a reader never sees half a file)."""
        if not isinstance(content, bytes | bytearray | memoryview):
            raise ValidationError(f"content must be bytes, not {type(content).__name__}")
        data = bytes(content)
        stored = Content(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), data=data)
        self.put_many([(storage_key, stored)])
        return StoredBlob(
            storage_key=storage_key, sha256=stored.sha256, size_bytes=stored.size_bytes
        )

    def put_many(self, blobs: Sequence[tuple[str, Content]]) -> None:
        """Write each content under its key, atomically and (if durable) flushed to disk.

        A staged content is moved into place, and its staging file is gone afterwards. Files
        are written by several threads at once: creating and flushing a file mostly waits for
        the file system, and those waits overlap.
        """
        targets = [(self.path_of(key), content) for key, content in blobs]
        for directory in {path.parent for path, _ in targets}:
            directory.mkdir(parents=True, exist_ok=True)
        if len(targets) <= 1:
            for path, content in targets:
                self._publish(path, content)
        else:
            with ThreadPoolExecutor(min(WRITER_THREADS, len(targets))) as pool:
                list(pool.map(lambda target: self._publish(*target), targets))
        if self.durable:
            _flush_files({path.parent for path, _ in targets})

    def delete(self, storage_key: str) -> bool:
        """Remove the blob of ``storage_key``; return whether there was one."""
        try:
            self.path_of(storage_key).unlink()
        except FileNotFoundError:
            return False
        return True

    def stage(self, source: BinaryIO) -> Content:
        """Copy ``source`` into a staging file of the store, hashing it on the way."""
        staging = self.root / STAGING_DIR
        staging.mkdir(parents=True, exist_ok=True)
        path = staging / _temporary_name()
        digest = hashlib.sha256()
        size = 0
        with path.open("xb") as target:
            while chunk := source.read(CHUNK_BYTES):
                digest.update(chunk)
                target.write(chunk)
                size += len(chunk)
        return Content(sha256=digest.hexdigest(), size_bytes=size, staged=path)

    def discard(self, content: Content) -> None:
        """Remove the staging file of ``content``, if it has one."""
        if content.staged is not None:
            content.staged.unlink(missing_ok=True)

    def _publish(self, path: Path, content: Content) -> None:
        # Written next to its target, so that the rename that publishes it stays on one file
        # system; a name starting with a dot is never a mapped key segment.
        temporary = path.parent / _temporary_name()
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


def _temporary_name() -> str:
    return f".{os.getpid()}.{next(_counter)}.{secrets.token_hex(4)}.tmp"


def _flush_file(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _flush_files(paths: Iterable[Path]) -> None:
    # One at a time, each flush waits for the device (milliseconds); many at once, the file
    # system commits them together.
    paths = list(paths)
    if len(paths) <= 1:
        for path in paths:
            _flush_file(path)
        return
    with ThreadPoolExecutor(min(WRITER_THREADS, len(paths))) as pool:
        list(pool.map(_flush_file, paths))
