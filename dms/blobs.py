"""Content-addressed blobs of a tenant: stored once, shared by revisions, released safely.

Identical bytes of one tenant are one blob, under :func:`~dms.storage.content_key` (the
tenant and the SHA-256: why per tenant is said there), shared by every revision that has them.
The tenant's ``blobs`` table registers each such blob; its row is the lock that keeps a blob
from being deleted while a transaction starts to reference it:

* **storing** (:func:`store_contents`), inside the writer's unit of work: claim the rows
  (upsert, locked until the writer commits), then write the files that are missing, then add
  the revisions. The file check comes after the claim: a file seen then cannot vanish before
  the writer commits;
* **purging** (:func:`purge_document`): a document in the trash is deleted for good with its
  revisions, in the caller's unit of work; its blobs stay until released;
* **releasing** (:func:`release_blobs`), in a transaction of its own after the purge
  committed: lock the rows (waiting for any writer that claimed them), then, in a new
  statement whose snapshot sees that writer's revisions, delete the rows that no revision
  references, delete their files, and commit.

A writer may also write files **ahead** (:func:`write_ahead`), before its claim, so that
writing them overlaps other work: nothing protects such a file until the claim, so the check
after the claim is what counts, and it writes again a file that a release deleted meanwhile.

The race this closes: a release that checked "no revision uses this blob" just before an
import of the same bytes added one, and deleted the file under it. Here the import holds the
row from before its file check until its commit, and the release checks only once it holds
the row. If a release dies after deleting a file but before its commit, its row survives with
no file and no reference; the next writer of those bytes finds the file missing and writes it.
A writer that dies after writing a file but before committing, or that wrote files ahead for
entries it then did not import, leaves files without a row: storage that nothing references,
never a reference to nothing.

Only writers that go through :func:`store_contents` take part: a revision added with
:func:`dms.services.add_revision` under a content-addressed key that it did not claim is not
protected. Keys that are not content-addressed (``acme/<document id>/2``) are not registered
and never released here.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine

from dms import tenancy
from dms.config import Settings
from dms.domain import Blob
from dms.domain.audit import OPERATOR
from dms.domain.validation import check_flag
from dms.errors import (
    InvalidTenantName,
    InvariantViolation,
    TenantExists,
    TenantNotFound,
    ValidationError,
)
from dms.jobs.validation import MAX_AGE, require_duration
from dms.storage import BlobStore, Content, StoredObject, content_key, content_space
from dms.storage.keys import sha256_of_content_key
from dms.storage.store import STAGING_GRACE
from dms.uow import UnitOfWork

#: Blobs released per transaction by :func:`release_blobs` when sweeping.
RELEASE_BATCH = 1000
#: Documents purged per transaction by :func:`purge_trash`.
PURGE_BATCH = 500


@dataclass(frozen=True, kw_only=True)
class StoredContents:
    """What :func:`store_contents` did: each SHA-256's key, and how many files it wrote."""

    keys: dict[str, str]
    written: int
    already_stored: int


def store_contents(
    uow: UnitOfWork, store: BlobStore, contents: Sequence[Content]
) -> StoredContents:
    """Make every content's blob exist and keep it until the unit of work ends.

    :func:`claim_contents`, then :func:`write_contents`: the blobs' rows are locked until
    commit or rollback, then the files that are missing are written in one durable batch.
    Staged contents are consumed: moved into place, or removed when their blob was already
    stored.
    """
    return write_contents(store, claim_contents(uow, contents), contents)


def claim_contents(uow: UnitOfWork, contents: Sequence[Content]) -> dict[str, str]:
    """Claim the blob of each content for the unit of work; return each SHA-256's key."""
    unique = {content.sha256: content for content in contents}
    keys = {sha256: content_key(uow.tenant, sha256) for sha256 in unique}
    uow.blobs.claim(
        Blob(storage_key=keys[sha256], sha256=sha256, size_bytes=content.size_bytes)
        for sha256, content in unique.items()
    )
    return keys


def write_ahead(store: BlobStore, tenant: str, contents: Sequence[Content]) -> frozenset[str]:
    """Write the files of in-memory ``contents`` that are missing, before any claim.

    Return the keys written. Only a head start: until the claim, a release may delete such a
    file again, and :func:`write_contents` after the claim is what makes sure it is there.
    Staged contents are left to that call (writing one moves its staging file away).
    """
    unique = {c.sha256: c for c in contents if c.data is not None}
    keys = {sha256: content_key(tenant, sha256) for sha256 in unique}
    missing = [(keys[s], c) for s, c in unique.items() if not store.exists(keys[s])]
    store.put_many(missing)
    return frozenset(key for key, _ in missing)


def write_contents(
    store: BlobStore,
    keys: dict[str, str],
    contents: Sequence[Content],
    *,
    written_ahead: Collection[str] = frozenset(),
) -> StoredContents:
    """Write the claimed contents whose files are missing (after :func:`claim_contents`).

    ``written_ahead``: keys that :func:`write_ahead` wrote for this writer, counted as written
    (not as already stored) when their files are still there.
    """
    unique: dict[str, Content] = {}
    for content in contents:
        if content.sha256 in unique:
            store.discard(content)
        else:
            unique[content.sha256] = content
    missing: list[tuple[str, Content]] = []
    ahead = 0
    for sha256, content in unique.items():
        if store.exists(keys[sha256]):
            store.discard(content)
            ahead += keys[sha256] in written_ahead
        else:
            missing.append((keys[sha256], content))
    store.put_many(missing)
    return StoredContents(
        keys=keys,
        written=len(missing) + ahead,
        already_stored=len(unique) - len(missing) - ahead,
    )


def purge_document(uow: UnitOfWork, document_id: uuid.UUID) -> list[str]:
    """Delete a document in the trash for good, with its revisions; return their storage keys.

    Raises :class:`~dms.errors.InvariantViolation` for a document that is not in the trash
    (delete it first), :class:`~dms.errors.NotFound` for an unknown one. The blobs stay: pass
    the keys to :func:`release_blobs` once this unit of work has committed.
    """
    document = uow.documents.get(document_id, include_deleted=True)
    if document.deleted_at is None:
        raise InvariantViolation(
            f"document {document_id} is not in the trash: delete it before purging it"
        )
    keys = sorted({revision.storage_key for revision in uow.revisions.history(document_id)})
    uow.documents.purge(document_id)
    return keys


@dataclass(frozen=True, kw_only=True)
class PurgedTrash:
    """What :func:`purge_trash` did: documents deleted for good, blobs whose files went."""

    documents: int
    blobs_released: int


def purge_trash(
    engine: Engine,
    *,
    tenant: str,
    store: BlobStore,
    deleted_before: datetime,
    settings: Settings | None = None,
) -> PurgedTrash:
    """Purge every document of ``tenant`` that went to the trash before ``deleted_before``.

    In transactions of :data:`PURGE_BATCH` documents, each followed by the release of the
    blobs that no revision references any more (:func:`release_blobs`). Stopped anywhere, what
    was purged stays purged and the next call goes on; a blob whose release did not run is
    found by a sweep (``release_blobs`` without keys).
    """
    purged = released = 0
    while True:
        with UnitOfWork(engine, tenant=tenant, system=OPERATOR, settings=settings) as uow:
            batch = uow.documents.trash(limit=PURGE_BATCH, deleted_before=deleted_before)
            keys = sorted({key for doc in batch for key in purge_document(uow, doc.id)})
            uow.commit()
        if not batch:
            return PurgedTrash(documents=purged, blobs_released=released)
        purged += len(batch)
        released += len(
            release_blobs(engine, tenant=tenant, store=store, storage_keys=keys, settings=settings)
        )


def release_blobs(
    engine: Engine,
    *,
    tenant: str,
    store: BlobStore,
    storage_keys: Iterable[str] | None = None,
    settings: Settings | None = None,
) -> list[str]:
    """Delete the registered blobs among ``storage_keys`` that no revision references.

    Without ``storage_keys``, every unreferenced blob of the tenant (a sweep, in transactions
    of :data:`RELEASE_BATCH`). Returns the keys whose rows and files were deleted. Blobs that a
    concurrent transaction is claiming are waited for, and kept if it references them.
    """
    if storage_keys is not None:
        return _release(engine, tenant, store, list(storage_keys), settings)
    released: list[str] = []
    while True:
        with UnitOfWork(engine, tenant=tenant, system=OPERATOR, settings=settings) as uow:
            candidates = uow.blobs.unreferenced(limit=RELEASE_BATCH)
        if not candidates:
            return released
        batch = _release(engine, tenant, store, candidates, settings)
        released.extend(batch)
        if not batch:  # all of them were claimed again meanwhile
            return released


def _release(
    engine: Engine,
    tenant: str,
    store: BlobStore,
    keys: list[str],
    settings: Settings | None,
) -> list[str]:
    with UnitOfWork(engine, tenant=tenant, system=OPERATOR, settings=settings) as uow:
        registry = uow.blobs
        locked = registry.lock(keys)
        released = registry.delete_unreferenced(locked)
        # Before the commit, while the rows are locked: a writer waiting for them finds the
        # file gone and writes it again.
        for key in released:
            store.delete(key)
        uow.commit()
    return released


@dataclass(frozen=True, kw_only=True)
class Garbage:
    """What :func:`collect_garbage` removed (or, in a dry run, would remove)."""

    dropped_tenants: dict[str, int]
    """Blobs of tenants no longer registered, by tenant."""
    unregistered: int
    """Files of registered tenants that no registry row knew (a writer died before its commit)."""
    unreferenced: int
    """Registered blobs that no revision references (a release that did not run)."""
    staging: int
    """Staging files older than the grace period (an import killed mid-file)."""

    @property
    def total(self) -> int:
        """Everything counted."""
        return (
            sum(self.dropped_tenants.values())
            + self.unregistered
            + self.unreferenced
            + self.staging
        )


def release_dropped_tenant(engine: Engine, store: BlobStore, tenant: str) -> int:
    """Delete the content-addressed blobs of ``tenant``, which must not be registered.

    What ``dms tenants drop`` does after the drop. Raises :class:`~dms.errors.TenantExists`
    if ``tenant`` is registered (then its blobs are its revisions'), also when it is created
    again under that name meanwhile: each page is deleted holding the name
    (:func:`dms.tenancy.lock_name`), so a new tenant of that name waits for the page in
    flight and the next page stops. Returns how many blobs went.
    """
    tenancy.validate_slug(tenant)
    released = 0
    while page := _page(store.objects(content_space(tenant)), RELEASE_BATCH):
        with engine.begin() as conn:
            tenancy.lock_name(conn, tenant)
            if tenancy.registered_slugs(conn, [tenant]):
                raise TenantExists(
                    f"tenant {tenant!r} is registered: its blobs are its revisions' "
                    f"({released} blob(s) of the dropped tenant of that name released before)"
                )
            released += sum(store.delete(found.storage_key) for found in page)
    return released


def collect_garbage(
    engine: Engine,
    store: BlobStore,
    *,
    tenants: Sequence[str] | None = None,
    staging_older_than: timedelta = STAGING_GRACE,
    dry_run: bool = False,
    settings: Settings | None = None,
) -> Garbage:
    """Remove from ``store`` what no tenant needs; safe while imports and purges run.

    - the content-addressed blobs of tenants that are no longer registered
      (:func:`release_dropped_tenant`);
    - for each registered tenant (or only ``tenants``): files that no registry row knows are
      registered (claimed, as a writer would), then released with the unreferenced blobs by
      :func:`release_blobs`. A writer that claims one of them meanwhile waits for the release
      and then writes it again, or the release waits for it and keeps it: the protocol of
      the module docstring, so nothing that a revision references is ever deleted;
    - staging files older than ``staging_older_than``.

    ``dry_run`` counts without changing anything. Bad arguments, and a named tenant that is not
    registered (:class:`~dms.errors.TenantNotFound`), are refused before anything changes.
    """
    require_duration("staging_older_than", staging_older_than, maximum=MAX_AGE, zero=True)
    check_flag("dry_run", dry_run)
    registered = {t.slug for t in tenancy.list_tenants(engine)}
    chosen = sorted(registered) if tenants is None else _named_tenants(tenants, registered)
    dropped = {
        name: _count_or_release_dropped(engine, store, name, dry_run)
        for name in store.namespaces()
        if tenants is None and name not in registered and _is_slug(name)
    }
    unregistered = unreferenced = 0
    for tenant in chosen:
        adopted, released = _collect_tenant(engine, store, tenant, dry_run, settings)
        unregistered += adopted
        unreferenced += released
    staging = store.sweep_staging(older_than=staging_older_than, dry_run=dry_run)
    return Garbage(
        dropped_tenants={name: count for name, count in dropped.items() if count},
        unregistered=unregistered,
        unreferenced=unreferenced,
        staging=staging,
    )


def _named_tenants(tenants: object, registered: set[str]) -> list[str]:
    if isinstance(tenants, str) or not isinstance(tenants, Sequence):
        raise ValidationError(f"tenants must be a list of names, not {tenants!r:.80}")
    names = [tenancy.validate_slug(name) for name in tenants]
    unknown = sorted(set(names) - registered)
    if unknown:
        raise TenantNotFound(f"tenant {unknown[0]!r} does not exist")
    return names


def _count_or_release_dropped(engine: Engine, store: BlobStore, tenant: str, dry_run: bool) -> int:
    if dry_run:
        return sum(1 for _ in store.objects(content_space(tenant)))
    return release_dropped_tenant(engine, store, tenant)


def _collect_tenant(
    engine: Engine, store: BlobStore, tenant: str, dry_run: bool, settings: Settings | None
) -> tuple[int, int]:
    """Register the tenant's unknown files, then release what no revision references."""
    adopted = 0
    found = (
        o for o in store.objects(content_space(tenant)) if sha256_of_content_key(o.storage_key)
    )
    while page := _page(found, RELEASE_BATCH):
        with UnitOfWork(engine, tenant=tenant, system=OPERATOR, settings=settings) as uow:
            registry = uow.blobs
            known = registry.registered_among(o.storage_key for o in page)
            unknown = [o for o in page if o.storage_key not in known]
            if not dry_run:
                registry.claim(_blob_of(o) for o in unknown)
                uow.commit()
        adopted += len(unknown)
    if dry_run:
        with UnitOfWork(engine, tenant=tenant, system=OPERATOR, settings=settings) as uow:
            unreferenced = len(uow.blobs.unreferenced(limit=2**31 - 1))
        return adopted, unreferenced
    released = len(release_blobs(engine, tenant=tenant, store=store, settings=settings))
    # Adopted files were unreferenced by definition: count them once, as adopted.
    return adopted, max(released - adopted, 0)


def _blob_of(found: StoredObject) -> Blob:
    sha256 = sha256_of_content_key(found.storage_key)
    assert sha256 is not None  # noqa: S101 (only content-addressed keys are collected)
    return Blob(storage_key=found.storage_key, sha256=sha256, size_bytes=found.size_bytes)


def _page(objects: Iterator[StoredObject], size: int) -> list[StoredObject]:
    return list(itertools.islice(objects, size))


def _is_slug(name: str) -> bool:
    try:
        tenancy.validate_slug(name)
    except InvalidTenantName:
        return False
    return True
