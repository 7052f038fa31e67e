"""Where the bytes of file revisions live: the blob store protocol and its two backends.

``dms`` stores metadata about file revisions (``storage_key``, ``sha256``, size, MIME type);
the bytes live in a :class:`BlobStore`: :class:`LocalBlobStore` (a directory) or
:class:`S3BlobStore` (an S3 bucket, ``pip install 'dms[s3]'``). :func:`open_store` opens one
by location, :func:`store_of` the one a database uses by default. Keys, and the
content-addressed space of each tenant, are defined in :mod:`dms.storage.keys`.
"""

from dms.storage.keys import (
    MAX_KEY_CHARS,
    MAX_KEY_SEGMENTS,
    MAX_SEGMENT_BYTES,
    check_key,
    content_key,
    content_space,
    segment_path,
)
from dms.storage.local import STAGING_DIR, LocalBlobStore
from dms.storage.locations import database_identity, open_store, store_of
from dms.storage.s3 import S3BlobStore
from dms.storage.store import (
    CHUNK_BYTES,
    BlobStore,
    Content,
    StoredBlob,
    StoredObject,
)

__all__ = [
    "CHUNK_BYTES",
    "MAX_KEY_CHARS",
    "MAX_KEY_SEGMENTS",
    "MAX_SEGMENT_BYTES",
    "STAGING_DIR",
    "BlobStore",
    "Content",
    "LocalBlobStore",
    "S3BlobStore",
    "StoredBlob",
    "StoredObject",
    "check_key",
    "content_key",
    "content_space",
    "database_identity",
    "open_store",
    "segment_path",
    "store_of",
]
