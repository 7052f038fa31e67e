"""File content by storage key: a local-directory blob store for development and the demo.

``dms`` stores metadata about file revisions (``storage_key``, ``sha256``, size, MIME type);
the bytes live elsewhere. :class:`LocalBlobStore` keeps them under one directory, which is what
the seed writes and what the revision-verification job reads. A production deployment puts an
object store behind the same two methods.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dms.errors import NotFound, ValidationError

# Keys are relative paths of safe segments: no "..", no absolute paths, nothing hidden.
_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}){0,15}")


@dataclass(frozen=True, kw_only=True)
class StoredBlob:
    """What :meth:`LocalBlobStore.put` wrote."""

    storage_key: str
    sha256: str
    size_bytes: int


class LocalBlobStore:
    """Blobs as files under ``root``, one file per storage key."""

    def __init__(self, root: Path) -> None:
        """Use ``root`` (created on first write)."""
        self.root = root

    def _path(self, storage_key: str) -> Path:
        if not _KEY.fullmatch(storage_key):
            raise ValidationError(f"invalid storage key {storage_key!r}")
        return self.root / storage_key

    def put(self, storage_key: str, content: bytes) -> StoredBlob:
        """Write ``content`` under ``storage_key`` atomically (a reader never sees half a file)."""
        path = self._path(storage_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as temporary:
            temporary.write(content)
        os.replace(temporary.name, path)
        return StoredBlob(
            storage_key=storage_key,
            sha256=hashlib.sha256(content).hexdigest(),
            size_bytes=len(content),
        )

    def read(self, storage_key: str) -> bytes:
        """The content stored under ``storage_key``, or :class:`NotFound`."""
        try:
            return self._path(storage_key).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no blob stored under {storage_key!r} in {self.root}") from None
