"""Reading a source file: its bytes (in memory, or staged in the store if large), hash and type.

A file is opened without following a symbolic link and without blocking (a FIFO swapped in
after the walk is refused, not waited on), and read once: the SHA-256 is computed on the bytes
that are stored. Its MIME type comes from its name (Python's :mod:`mimetypes` and the system's
``mime.types``), normalised; a compressed file (``.gz``, ``.bz2``, ``.xz`` ...) is typed as
what its bytes are, and a name without a known type is typed by its bytes (text or binary).
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

from dms.detection import looks_like_text
from dms.domain.validation import normalize_mime_type
from dms.errors import ValidationError
from dms.storage import BlobStore, Content

#: Files up to this size are held in memory until their batch commits; larger ones are staged.
IN_MEMORY_BYTES = 256 * 1024

#: The type of a file by the compression :mod:`mimetypes` reports for its name.
COMPRESSED_TYPES = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}
UNKNOWN_TYPE = "application/octet-stream"
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, kw_only=True)
class ReadFile:
    """A source file, read: its content and MIME type."""

    content: Content
    mime_type: str


class NotRegularFile(OSError):
    """The path no longer names a regular file (it changed since the walk)."""


def read_file(path: bytes, title: str, store: BlobStore) -> ReadFile:
    """Read the file at ``path``; its MIME type is guessed from ``title`` and its bytes.

    Raises :class:`OSError` (including :class:`NotRegularFile`) if it cannot be read.
    """
    descriptor = os.open(path, _OPEN_FLAGS)
    with os.fdopen(descriptor, "rb") as source:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotRegularFile("not a regular file any more")
        start = source.read(IN_MEMORY_BYTES + 1)
        if len(start) <= IN_MEMORY_BYTES:
            content = Content(
                sha256=hashlib.sha256(start).hexdigest(), size_bytes=len(start), data=start
            )
        else:
            source.seek(0)
            content = store.stage(source)
    return ReadFile(content=content, mime_type=guess_mime_type(title, start))


def guess_mime_type(name: str, start: bytes) -> str:
    """The normalised MIME type of a file called ``name`` whose bytes begin with ``start``."""
    # Only the extensions: mimetypes reads its argument as a URL ('#', '?' and 'data:' mean
    # something there) and a file name is not one.
    suffixes = "".join(PurePosixPath(name).suffixes[-2:])
    kind, encoding = mimetypes.guess_type("file" + suffixes, strict=False)
    if encoding is not None:
        return COMPRESSED_TYPES.get(encoding, UNKNOWN_TYPE)
    if kind is not None:
        try:
            return normalize_mime_type(kind)
        except ValidationError:
            pass  # a malformed entry in the system's mime.types: judge the bytes instead
    return "text/plain" if looks_like_text(start) else UNKNOWN_TYPE
