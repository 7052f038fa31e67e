"""A generated source tree with what real file shares hold, and helpers to check an import.

:func:`make_tree` writes, under a temporary folder: nested folders, names that differ only in
case, gzip'd and UTF-16 texts, binary data with NUL bytes, identical files, an empty file, a
file larger than what is held in memory, names with spaces, ``+``, ``@``, a newline, a leading
dot, a blank name and bytes that are not UTF-8, a symbolic link and a FIFO.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs, tenancy
from dms.blobs import store_contents
from dms.importing.files import IN_MEMORY_BYTES
from dms.jobs import JobState
from dms.processing import (
    INTEGRITY_FIELD,
    PREVIEW_FIELD,
    VERIFY_REVISION,
    enqueue_verification,
    handlers,
)
from dms.schema import tenant as t
from dms.services import add_revision, create_document
from dms.storage import BlobStore, Content, LocalBlobStore
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork

LATIN1_NAME = b"caf\xe9 cr\xe8me.txt"
SAME_TEXT = b"the same bytes in two places\n"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def make_tree(base: Path) -> Path:
    """Write the test tree under ``base``; return its root folder ``share``."""
    root = base / "share"
    docs = root / "docs"
    _write(docs / "index.html", b"<html><body>lower</body></html>")
    _write(docs / "Index.html", b"<html><body>upper</body></html>")
    _write(docs / "guide" / "intro.txt", b"Introduction\n" * 20)
    _write(docs / "guide" / "deeper" / "notes.md", b"# Notes\n\nSome *markdown*.\n")
    _write(docs / "man" / "ls.1.gz", gzip.compress(b".TH LS 1\n.SH NAME\nls \\- list\n" * 30))
    _write(docs / "man" / "readme.txt.gz", gzip.compress(b"compressed readme text\n" * 40))
    _write(docs / "unicode.txt", "UTF-16 text: héllo wörld\n".encode("utf-16"))
    _write(docs / "table.sgml", b"<!DOCTYPE table><table></table>\n")
    _write(root / "data" / "blob.bin", bytes(range(256)) * 8 + b"\x00\x00\x00")
    _write(root / "data" / "nul.txt", b"text with a NUL\x00 in the middle\n")
    _write(root / "data" / "empty.txt", b"")
    _write(root / "data" / "large.log", b"a line of a large log file\n" * (IN_MEMORY_BYTES // 20))
    _write(root / "copies" / "one.txt", SAME_TEXT)
    _write(root / "copies" / "two.txt", SAME_TEXT)
    _write(root / "Copies" / "three.txt", SAME_TEXT)
    _write(root / "odd" / "with space + plus@at.txt", b"odd name\n")
    _write(root / "odd" / ".hidden", b"dot file\n")
    _write(root / "odd" / "new\nline.txt", b"newline in the name\n")
    _write(root / "odd" / "   ", b"blank name\n")
    odd = os.fsencode(root / "odd")
    with open(os.path.join(odd, LATIN1_NAME), "wb") as latin1:
        latin1.write(b"latin-1 name\n")
    (root / "odd" / "link.txt").symlink_to(root / "odd" / ".hidden")
    os.mkfifo(root / "odd" / "pipe")
    (root / "empty folder").mkdir()
    return root


def source_files(root: Path) -> dict[bytes, bytes]:
    """Every regular file under ``root``: path relative to ``root``'s parent -> bytes."""
    found: dict[bytes, bytes] = {}
    base = os.fsencode(root.parent)
    for folder, _, names in os.walk(os.fsencode(root)):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as source:
                    found[os.path.relpath(path, base)] = source.read()
    return found


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The test tree (see :func:`make_tree`)."""
    return make_tree(tmp_path / "source")


@pytest.fixture
def app_engine(engine: Engine, tenant: str) -> Iterator[Engine]:
    """An engine acting as the application role, granted what a deployment grants it."""
    application = application_engine(engine, [tenant])
    yield application
    application.dispose()


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    """A blob store of the test's own (not flushed to disk: throw-away)."""
    return LocalBlobStore(tmp_path / "blobs", durable=False)


def imported_files(engine: Engine, tenant: str) -> dict[bytes, tuple[str, str, int, str, str]]:
    """Imported documents by source path: (title, sha256, size, storage key, MIME type)."""
    p, d, r = t.import_provenance, t.documents, t.file_revisions
    query = (
        sa.select(
            p.c.source_path, d.c.title, r.c.sha256, r.c.size_bytes, r.c.storage_key, r.c.mime_type
        )
        .join(d, d.c.id == p.c.document_id)
        .join(r, r.c.id == d.c.current_revision_id)
    )
    with engine.connect() as conn:
        rows = tenancy.route(conn, tenant).execute(query).all()
    return {bytes(row[0]): tuple(row[1:]) for row in rows}


def relative(root: Path, path: bytes) -> bytes:
    """``path`` relative to ``root``'s parent."""
    return os.path.relpath(path, os.fsencode(root.parent))


def digest(data: bytes) -> str:
    """The SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def run_verifications(engine: Engine, tenant: str, store: BlobStore) -> dict[JobState, int]:
    """Run a worker until the tenant's jobs (verification, extraction) are all finished; count
    the verification jobs' states."""
    with jobs.Worker(
        engine,
        handlers(store),
        jobs.WorkerConfig(concurrency=2, poll_seconds=0.1),
        unit_of_work=UnitOfWork.factory(engine),
    ):
        for _ in range(600):
            with engine.connect() as conn:
                every = jobs.stats(conn, tenant=tenant)
                stats = jobs.stats(conn, tenant=tenant, kind=VERIFY_REVISION)
            if every.total(JobState.QUEUED) + every.total(JobState.RUNNING) == 0:
                break
            time.sleep(0.1)
    return {state: stats.total(state) for state in JobState}


def metadata_values(engine: Engine, tenant: str) -> dict[str, list[object]]:
    """The option of every Integrity value and the text of every preview of the tenant."""
    v, f = t.document_metadata, t.metadata_fields
    with engine.connect() as conn:
        routed = tenancy.route(conn, tenant)
        rows = routed.execute(
            sa.select(f.c.name, v.c.option_id, v.c.value_text).join(f, f.c.id == v.c.field_id)
        ).all()
    return {
        "integrity": [row.option_id for row in rows if row.name == INTEGRITY_FIELD],
        "preview": [row.value_text for row in rows if row.name == PREVIEW_FIELD],
    }


def content_of(data: bytes) -> Content:
    """``data`` on its way into a store, in memory."""
    return Content(sha256=digest(data), size_bytes=len(data), data=data)


def upload(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    store: BlobStore,
    data: bytes,
    *,
    verify: bool = False,
) -> tuple[uuid.UUID, str]:
    """A document whose one revision has ``data``, stored content-addressed: its id and key.

    ``verify``: its verification job enqueued too.
    """
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        key = store_contents(uow, store, [content_of(data)]).keys[digest(data)]
        document = create_document(uow, title=f"{uuid.uuid4().hex}.txt")
        revision = add_revision(
            uow,
            document.id,
            storage_key=key,
            sha256=digest(data),
            size_bytes=len(data),
            mime_type="text/plain",
        )
        if verify:
            enqueue_verification(uow, revision)
        uow.commit()
    return document.id, key
