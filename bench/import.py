"""Import speed: ``dms.importing.import_tree`` against one unit of work per directory.

    python bench/import.py [--files 20000] [--folders 2000] [--baseline-files 2000] [--verify]

Generates a tree of small files (under 16 KiB: text, gzip'd text, binary, duplicates, names
that differ only in case) in nested folders, imports it into a throw-away tenant with blobs
written durably (flushed to disk) and verification jobs enqueued, and prints files/s with the
time split between reading and hashing, blob writes and the database. The baseline imports a
part of the same tree the way the README's API reads, one unit of work per directory and a
round trip per row (``folders.add``, ``create_document``, ``store.put``, ``add_revision``,
``enqueue_verification``), measured in the same run on the same server. ``--verify`` then runs
a worker over every verification job and checks that all are done and none dead.

The import and the baseline act as the application's role, as deployed (no superuser, no
``BYPASSRLS``: :func:`dms.testing.roles.application_engine`), so that row-level security and
the rights triggers are part of what is measured; the same import as the owner (a superuser,
whom no policy holds) runs in the same run into a tenant of its own, for the ratio.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy.engine import Engine

import dms
from dms import DocumentWorker, WorkerConfig, jobs
from dms.importing import ImportReport, import_tree
from dms.importing.files import guess_mime_type
from dms.jobs import JobState
from dms.processing import VERIFY_REVISION, define_processing_fields, enqueue_verification, handlers
from dms.services import add_revision, create_document
from dms.storage import LocalBlobStore
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork
from dms.users import create_user, create_users_stand_in

WORDS = [
    "document",
    "archive",
    "invoice",
    "report",
    "kernel",
    "module",
    "driver",
    "page",
    "manual",
    "section",
    "option",
    "value",
    "system",
    "file",
    "folder",
    "tree",
    "import",
    "export",
    "network",
    "device",
    "memory",
    "process",
    "thread",
    "signal",
]
MAX_FILE_BYTES = 16 * 1024


def _content(rng: random.Random, n: int, previous: list[bytes]) -> bytes:
    kind = n % 10
    if kind == 0 and previous:  # a duplicate: content-addressed blobs store it once
        return rng.choice(previous)
    if kind == 1:
        return gzip.compress(_text(rng, rng.randrange(500, 12_000)))
    if kind == 2:
        return rng.randbytes(rng.randrange(100, MAX_FILE_BYTES))
    return _text(rng, rng.randrange(200, 12_000))


def _text(rng: random.Random, size: int) -> bytes:
    words = " ".join(rng.choice(WORDS) for _ in range(size // 6 + 1))
    return words.encode()[:size]


def generate(root: Path, files: int, folders: int, seed: int = 15) -> None:
    """``files`` files spread over ``folders`` folders: top folders with subfolders."""
    rng = random.Random(seed)
    tops = max(1, round(folders**0.5 * 0.9))
    paths = [root / f"top {t:02}" for t in range(tops)]
    paths += [root / f"top {n % tops:02}" / f"sub {n:04}" for n in range(folders - tops)]
    for path in paths:
        path.mkdir(parents=True)
    previous: list[bytes] = []
    for n in range(files):
        data = _content(rng, n, previous)
        if len(previous) < 200:
            previous.append(data)
        twin = n % 500 == 0 and n > 0  # "file 00499.txt" next to "File 00499.txt"
        folder = paths[(n - 1 if twin else n) % len(paths)]
        name = f"file {n - 1:05}.txt" if twin else f"File {n:05}.txt"
        if n % 10 == 1:
            name += ".gz"
        elif n % 10 == 2:
            name = name.replace(".txt", ".bin")
        (folder / name).write_bytes(data)


def baseline(
    engine: Engine, tenant: str, user: uuid.UUID, root: Path, *, store: LocalBlobStore, limit: int
) -> tuple[int, float]:
    """Import up to ``limit`` files one unit of work per directory; return (files, seconds)."""
    done = 0
    started = time.perf_counter()
    folder_ids: dict[Path, uuid.UUID | None] = {root.parent: None}
    for folder, _, names in sorted(os.walk(root)):
        if done >= limit:
            break
        path = Path(folder)
        with UnitOfWork(engine, tenant=tenant, user_id=user) as uow:
            created = uow.folders.add(name=path.name, parent_id=folder_ids[path.parent])
            folder_ids[path] = created.id
            for name in sorted(names)[: limit - done]:
                data = (path / name).read_bytes()
                document = create_document(uow, title=name, folder_id=created.id)
                stored = store.put(f"{tenant}/{document.id}/1", data)
                revision = add_revision(
                    uow,
                    document.id,
                    storage_key=stored.storage_key,
                    sha256=stored.sha256,
                    size_bytes=stored.size_bytes,
                    mime_type=guess_mime_type(name, data[:8192]),
                )
                enqueue_verification(uow, revision)
                done += 1
            uow.commit()
    return done, time.perf_counter() - started


def verify(engine: Engine, tenant: str, store: LocalBlobStore) -> str:
    """Run a worker until the tenant's verification jobs are finished; describe the outcome."""
    started = time.perf_counter()
    with DocumentWorker(engine, handlers(store), WorkerConfig(concurrency=4)):
        while True:
            with engine.connect() as conn:
                stats = jobs.stats(conn, tenant=tenant, kind=VERIFY_REVISION)
            if stats.total(JobState.QUEUED) + stats.total(JobState.RUNNING) == 0:
                break
            time.sleep(0.5)
    elapsed = time.perf_counter() - started
    return (
        f"verification: {stats.total(JobState.DONE)} done, {stats.total(JobState.DEAD)} dead "
        f"in {elapsed:.1f} s"
    )


def describe(report: ImportReport) -> str:
    c, t = report.counts, report.timings
    other = t.total - t.database - t.waiting_for_reads - t.waiting_for_blobs
    return (
        f"import_tree: {c.files_done} files, {c.folders_created} folders in {t.total:.2f} s = "
        f"{report.files_per_second:.0f} files/s\n"
        f"  on the import's thread: database {t.database:.2f} s ({t.database / t.total:.0%}), "
        f"waiting for the next batch (read, blobs written ahead) {t.waiting_for_reads:.2f} s "
        f"({t.waiting_for_reads / t.total:.0%}), waiting for the blob check "
        f"{t.waiting_for_blobs:.2f} s ({t.waiting_for_blobs / t.total:.0%}), other "
        f"{other:.2f} s ({other / t.total:.0%})\n"
        f"  alongside, in their own threads: reading and hashing {t.reading_and_hashing:.2f} s, "
        f"blob writes (ahead, and the check after each claim) {t.blob_writes:.2f} s\n"
        f"  {c.batches} batches; {c.blobs_written} blobs written, {c.blobs_already_stored} "
        f"shared; {c.renamed} renamed; {c.jobs_enqueued} jobs enqueued; "
        f"{c.bytes_read / 1e6:.1f} MB read"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--folders", type=int, default=2_000)
    parser.add_argument("--baseline-files", type=int, default=2_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--not-durable", action="store_true", help="blob writes without fsync")
    parser.add_argument("--verify", action="store_true", help="run the verification jobs too")
    parser.add_argument("--url", default=None, help="database URL (default: DMS_DATABASE_URL)")
    args = parser.parse_args()
    engine = dms.create_engine(args.url)
    create_users_stand_in(engine)
    dms.upgrade(engine)
    work = Path(tempfile.mkdtemp(prefix="dms-import-bench-"))
    tenants = [f"bench{uuid.uuid4().hex[:8]}" for _ in range(3)]
    try:
        source = work / "share"
        generate(source, args.files, args.folders)
        size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
        print(f"tree: {args.files} files ({size / 1e6:.1f} MB) in {args.folders} folders")
        for tenant in tenants:
            dms.create_tenant(engine, tenant)
        with engine.begin() as conn:
            user = create_user(conn, email=f"{tenants[0]}@example.org", display_name="Bench")
        app = application_engine(engine)
        store = LocalBlobStore(work / "blobs", durable=not args.not_durable)
        report = import_tree(
            app, source, tenant=tenants[0], user_id=user, store=store, batch_files=args.batch_size
        )
        print("as the application role:", describe(report))
        owner = import_tree(
            engine,
            source,
            tenant=tenants[2],
            user_id=user,
            store=store,
            batch_files=args.batch_size,
        )
        print(
            f"as the owner (a superuser): {owner.files_per_second:.0f} files/s, database "
            f"{owner.timings.database:.2f} s; the application role takes "
            f"{owner.files_per_second / report.files_per_second:.2f}x its time"
        )
        with UnitOfWork(app, tenant=tenants[1], user_id=user) as uow:
            define_processing_fields(uow)
            uow.commit()
        files, seconds = baseline(
            app, tenants[1], user, source, store=store, limit=args.baseline_files
        )
        print(
            f"baseline (one unit of work per directory, application role): {files} files in "
            f"{seconds:.2f} s = {files / seconds:.0f} files/s; import_tree is "
            f"{report.files_per_second / (files / seconds):.1f}x"
        )
        if args.verify:
            print(verify(app, tenants[0], store))
        app.dispose()
    finally:
        for tenant in tenants:  # their jobs go with them (foreign key, ON DELETE CASCADE)
            dms.drop_tenant(engine, tenant)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
