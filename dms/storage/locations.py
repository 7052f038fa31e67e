"""Which blob store: a location as an operator writes it, and the default one of a database.

A location is a directory or ``s3://bucket/prefix``. Without one, ``DMS_BLOBS``; without that,
a folder of its own for each database, ``DMS_DATA_DIR/blobs/<database>-<system identifier>``:
two databases (even of the same name, on two servers) never share a folder, and a database is
found again under any URL that reaches it (``localhost`` or ``127.0.0.1``).
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms.config import Settings, settings_of
from dms.errors import ValidationError
from dms.storage.keys import segment_path
from dms.storage.local import LocalBlobStore
from dms.storage.s3 import SCHEME, S3BlobStore
from dms.storage.store import BlobStore

#: Under ``DMS_DATA_DIR``: the default stores' parent, and the S3 stores' staging files.
BLOBS_DIR = "blobs"


def open_store(location: str | os.PathLike[str], *, settings: Settings | None = None) -> BlobStore:
    """The store at ``location``: ``s3://bucket/prefix`` or a directory.

    An S3 store stages large files under ``DMS_DATA_DIR`` (of ``settings``, default the
    environment's).
    """
    if isinstance(location, str) and location.startswith(SCHEME):
        settings = settings or Settings.from_env()
        return S3BlobStore.from_location(location, staging_dir=settings.data_dir)
    if not isinstance(location, str | os.PathLike) or isinstance(location, bytes) or not location:
        raise ValidationError(f"a blob store is a directory or {SCHEME}..., not {location!r:.80}")
    return LocalBlobStore(location)


def store_of(engine: Engine, location: str | os.PathLike[str] | None = None) -> BlobStore:
    """The store at ``location``, else ``DMS_BLOBS``, else the database's default folder."""
    settings = settings_of(engine)
    chosen = location or settings.blobs
    if chosen:
        return open_store(chosen, settings=settings)
    return LocalBlobStore(settings.data_dir / BLOBS_DIR / segment_path(database_identity(engine)))


def database_identity(engine: Engine) -> str:
    """``<database>-<system identifier>``: the same for every URL that reaches this database."""
    statement = sa.select(
        sa.func.current_database(),
        sa.select(sa.column("system_identifier"))
        .select_from(sa.func.pg_control_system())
        .scalar_subquery(),
    )
    with engine.connect() as conn:
        name, system_identifier = conn.execute(statement).one()
    return f"{name}-{system_identifier}"
