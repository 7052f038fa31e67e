"""Importing a file tree into a tenant, in batches that each commit whole.

Folders are mirrored as folders, files become documents with a first revision. The tree is
read in batches of files; each batch is one transaction that claims its blobs
(content-addressed, :mod:`dms.blobs`) and makes sure their files are there, creates the
folders level by level (a statement per level), the documents with their provenance, then
their revisions (two statements, the key between them deferred for their time:
:meth:`~dms.repositories.imports.ImportRepository.import_documents`), enqueues the
verification jobs (one per revision, idempotent, one statement) and commits: about nine round
trips for 500 files. An interrupted import therefore leaves whole batches behind: every
document with its revision, its blob and its job, or nothing.

Three threads work a batch apart: while one batch is in the database, the missing blobs of
the next are written ahead of its transaction (:func:`dms.blobs.write_ahead`) and the batch
after that is read and hashed.

Re-running the same import resumes it: each entry is looked up in the import provenance by
the folder it goes into and its source name (bytes). A folder found there is reused; a file
found with the same SHA-256 is left alone; a file found with other content gets a new
revision. Nothing is imported twice.

Within a transaction the blobs are claimed first, before any folder is created: folder
inserts take the tenant's folder-tree lock (trigger ``folders_guard``), and two imports that
took it and blob locks in opposite orders could wait for each other. A file left out after its
blob was claimed (its name taken by a concurrent writer, with ``--names refuse``) leaves that
blob unreferenced: :func:`dms.blobs.release_blobs` without keys sweeps it. Files written ahead
for entries that are then not imported (skipped, or an import stopped early) are files
without a row, as after a crash: nothing references them, and a later import of the same
bytes finds them there.

By role: :mod:`.pipeline` reads the tree in batches ahead of the database, :mod:`.plan`
decides what each entry becomes, :mod:`.writes` writes a planned batch; this module runs them,
one transaction per batch, and keeps the report's timings.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

from sqlalchemy.engine import Engine

from dms import jobs, tenancy
from dms.blobs import StoredContents, claim_contents, write_ahead, write_contents
from dms.config import Settings
from dms.errors import ValidationError
from dms.processing import define_processing_fields, verification_jobs
from dms.services import extraction_jobs
from dms.storage import BlobStore, Content
from dms.uow import UnitOfWork

from . import writes
from .names import NamePolicy
from .pipeline import ReadBatch, ahead, read_batches
from .plan import Batch, TreePlan
from .report import ImportProgress, ImportReport, shown_path
from .walk import source_root, walk

#: Files per batch (one transaction each).
DEFAULT_BATCH_FILES = 500


class _Importer:
    """One run of :func:`import_tree`: the stages wired together, and the report's timings."""

    def __init__(
        self,
        engine: Engine,
        root: bytes,
        *,
        tenant: str,
        user_id: uuid.UUID,
        store: BlobStore,
        into: uuid.UUID | None,
        policy: NamePolicy,
        batch_files: int,
        progress: Callable[[ImportProgress], None] | None,
        settings: Settings | None,
    ) -> None:
        self.engine, self.root, self.tenant, self.user_id = engine, root, tenant, user_id
        self.store, self.batch_files, self.progress, self.settings = (
            store,
            batch_files,
            progress,
            settings,
        )
        self.report = ImportReport(
            tenant=tenant, source=shown_path(root), into=into, name_policy=policy.value
        )
        self.counts, self.timings = self.report.counts, self.report.timings
        self.tree = TreePlan(report=self.report, into=into, policy=policy)
        self.defaults: dict[uuid.UUID, object] = {}
        self._blob_clock = threading.Lock()
        self.started = time.perf_counter()

    def run(self) -> ImportReport:
        self._prepare()
        batches = read_batches(
            walk(self.root),
            store=self.store,
            batch_files=self.batch_files,
            unwanted=self.tree.parent_skipped,
            counts=self.counts,
            timings=self.timings,
        )
        with (
            ThreadPoolExecutor(1, thread_name_prefix="dms-import-reader") as reader,
            ThreadPoolExecutor(1, thread_name_prefix="dms-import-ahead") as writer,
        ):
            # Three stages, each a batch ahead of the next: while batch k is written to the
            # database, the blobs of batch k + 1 are written ahead and batch k + 2 is read.
            read = ahead(reader, batches, self._discard)
            written = ahead(writer, map(self._write_ahead, read), self._discard)
            with closing(read), closing(written):
                while (batch := self._next(written)) is not None:
                    try:
                        self._import(batch)
                    finally:
                        self._discard(batch)
                    if self.progress is not None:
                        self.progress(self._progress())
        self.timings.total = time.perf_counter() - self.started
        return self.report

    def _prepare(self) -> None:
        with self._unit() as uow:
            tenancy.get_tenant(uow.connection, self.tenant)
            if self.tree.into is not None:
                self.tree.into_depth = len(uow.folders.path(uow.folders.get(self.tree.into).id))
            define_processing_fields(uow)
            self.defaults = writes.defaults(uow)
            uow.commit()

    def _next(self, batches: Iterator[ReadBatch]) -> ReadBatch | None:
        waited = time.perf_counter()
        batch = next(batches, None)
        self.timings.waiting_for_reads += time.perf_counter() - waited
        return batch

    def _write_ahead(self, batch: ReadBatch) -> ReadBatch:
        """Write the batch's blobs that are missing, before its transaction claims them."""
        started = time.perf_counter()
        contents = [item.read.content for item in batch.items if item.read is not None]
        try:
            batch.written_ahead = write_ahead(self.store, self.tenant, contents)
        finally:
            self._add_blob_time(time.perf_counter() - started)
        return batch

    def _add_blob_time(self, seconds: float) -> None:
        # Two threads write blobs (ahead, and after the claim): += is not atomic.
        with self._blob_clock:
            self.timings.blob_writes += seconds

    def _discard(self, batch: ReadBatch) -> None:
        batch.discard(self.store)

    def _unit(self) -> UnitOfWork:
        return UnitOfWork(
            self.engine, tenant=self.tenant, user_id=self.user_id, settings=self.settings
        )

    def _progress(self) -> ImportProgress:
        return ImportProgress(
            files_done=self.counts.files_done,
            bytes_read=self.counts.bytes_read,
            elapsed_seconds=time.perf_counter() - self.started,
        )

    def _import(self, read: ReadBatch) -> None:
        """One batch, one transaction: plan it, claim its blobs, write it, commit."""
        started = time.perf_counter()
        with self._unit() as uow:
            known = self.tree.known(uow, read.items)
            batch = Batch()
            self.tree.plan_folders(uow, read.items, known, batch)
            self.tree.classify_files(read.items, known, batch)
            contents = [f.read.content for f in batch.files]
            keys = claim_contents(uow, contents)
            # The files are written while the rows are written: both only have to be done
            # before the commit, which is when the revisions become visible.
            with ThreadPoolExecutor(1, thread_name_prefix="dms-import-blobs") as writer:
                writing = writer.submit(self._write_blobs, keys, contents, read.written_ahead)
                enqueued = self._write(uow, batch, keys)
                waited = time.perf_counter()
                stored = writing.result()
                blob_wait = time.perf_counter() - waited
            uow.commit()
        self.counts.blobs_written += stored.written
        self.counts.blobs_already_stored += stored.already_stored
        self.counts.jobs_enqueued += enqueued
        self.counts.batches += 1
        self.timings.waiting_for_blobs += blob_wait
        self.timings.database += time.perf_counter() - started - blob_wait

    def _write(self, uow: UnitOfWork, batch: Batch, keys: dict[str, str]) -> int:
        """Write the planned batch and enqueue its revisions' jobs; return how many were new."""
        writes.create_folders(uow, batch, self.tree)
        writes.create_documents(uow, batch, self.tree, keys=keys, values=self.defaults)
        revisions = writes.add_revisions(uow, batch, self.tree, keys)
        writes.record_provenance(uow, batch)
        new_jobs = [
            *verification_jobs(self.tenant, revisions),
            *extraction_jobs(self.tenant, revisions),
        ]
        return sum(1 for job in jobs.enqueue_many(uow, new_jobs) if job.created)

    def _write_blobs(
        self, keys: dict[str, str], contents: list[Content], written_ahead: frozenset[str]
    ) -> StoredContents:
        started = time.perf_counter()
        try:
            return write_contents(self.store, keys, contents, written_ahead=written_ahead)
        finally:
            self._add_blob_time(time.perf_counter() - started)


def import_tree(
    engine: Engine,
    source: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    *,
    tenant: str,
    user_id: uuid.UUID,
    store: BlobStore,
    into: uuid.UUID | None = None,
    name_policy: NamePolicy = NamePolicy.RENAME,
    batch_files: int = DEFAULT_BATCH_FILES,
    progress: Callable[[ImportProgress], None] | None = None,
    settings: Settings | None = None,
) -> ImportReport:
    """Import the folder (or file) ``source`` into ``tenant``, under folder ``into``.

    The source folder becomes a folder of that name in ``into`` (top level if ``None``), with
    its folders and files below it; ``user_id`` is recorded as their creator. Blobs go to
    ``store``. ``name_policy`` decides what happens to names that collide or that the rules
    refuse (:mod:`dms.importing.names`). ``progress`` is called after each committed batch.

    Bad input (a source that is not there, an unknown tenant or folder, a tenant with a
    required field that has no default) raises a :class:`~dms.errors.DmsError` before
    anything is written. Re-running an interrupted or finished import resumes it.
    """
    root = source_root(source)
    tenancy.validate_slug(tenant)
    if not isinstance(batch_files, int) or isinstance(batch_files, bool) or batch_files < 1:
        raise ValidationError(f"batch_files must be a positive int, not {batch_files!r}")
    if not isinstance(user_id, uuid.UUID) or not isinstance(into, uuid.UUID | None):
        raise ValidationError(f"user_id and into must be uuid.UUID, not {user_id!r}, {into!r}")
    try:
        policy = NamePolicy(name_policy)
    except ValueError:
        raise ValidationError(
            f"name_policy must be 'rename' or 'refuse', not {name_policy!r}"
        ) from None
    return _Importer(
        engine,
        root,
        tenant=tenant,
        user_id=user_id,
        store=store,
        into=into,
        policy=policy,
        batch_files=batch_files,
        progress=progress,
        settings=settings,
    ).run()
