"""Content-addressed blobs: purged documents release the blobs no revision shares, safely."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from dms import provisioning
from dms.blobs import (
    claim_contents,
    purge_document,
    purge_trash,
    release_blobs,
    store_contents,
    write_ahead,
    write_contents,
)
from dms.cli import main
from dms.domain import NewRevision
from dms.errors import InvariantViolation, NotFound
from dms.services import create_document, delete_folder
from dms.storage import LocalBlobStore, content_key
from dms.testing.blocking import row_lock_waits
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork
from tests.importing.conftest import content_of, digest, upload

Capture = pytest.CaptureFixture[str]


def _trash_and_purge(engine: Engine, tenant: str, document_id: uuid.UUID) -> list[str]:
    with UnitOfWork(engine, tenant=tenant) as uow:
        document = uow.documents.get(document_id)
        uow.documents.soft_delete(document_id, version=document.version)
        keys = purge_document(uow, document_id)
        uow.commit()
    return keys


def _registered(engine: Engine, tenant: str, key: str) -> bool:
    with UnitOfWork(engine, tenant=tenant) as uow:
        return uow.blobs.get(key) is not None


def test_shared_blob_stays_until_its_last_revision_is_purged(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    first, key = upload(engine, tenant, user_id, store, b"shared bytes")
    second, same_key = upload(engine, tenant, user_id, store, b"shared bytes")

    kept = release_blobs(
        engine, tenant=tenant, store=store, storage_keys=_trash_and_purge(engine, tenant, first)
    )
    still_there = store.get(key)
    released = release_blobs(
        engine, tenant=tenant, store=store, storage_keys=_trash_and_purge(engine, tenant, second)
    )

    assert same_key == key
    assert kept == []
    assert still_there == b"shared bytes"
    assert released == [key]
    assert not store.exists(key)
    assert not _registered(engine, tenant, key)


def test_a_sweep_releases_every_unreferenced_blob(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    gone, gone_key = upload(engine, tenant, user_id, store, b"purged")
    _, kept_key = upload(engine, tenant, user_id, store, b"kept")
    _trash_and_purge(engine, tenant, gone)

    assert release_blobs(engine, tenant=tenant, store=store) == [gone_key]
    assert store.exists(kept_key)
    assert release_blobs(engine, tenant=tenant, store=store) == []


def test_purging_a_live_document_is_refused_and_changes_nothing(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    document_id, key = upload(engine, tenant, user_id, store, b"live")
    with UnitOfWork(engine, tenant=tenant) as uow, pytest.raises(InvariantViolation, match="trash"):
        purge_document(uow, document_id)
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.documents.get(document_id).current_revision_id is not None
    assert store.get(key) == b"live"


def _lock_waits(engine: Engine, tenant: str) -> int:
    """Sessions of this database waiting for a row lock right now (on Citus: on any node)."""
    with engine.connect() as conn:
        return row_lock_waits(conn)


def test_release_waits_for_an_import_that_claimed_the_blob_and_keeps_it(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    """The race: a release checks "unreferenced" while an import starts referencing the blob."""
    purged, key = upload(engine, tenant, user_id, store, b"contested bytes")
    keys = _trash_and_purge(engine, tenant, purged)  # now unreferenced
    released: list[str] = []
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as importer:
        # The import claims the blob (the file is there: it is not rewritten) ...
        assert store_contents(importer, store, [content_of(b"contested bytes")]).written == 0
        releaser = threading.Thread(
            target=lambda: released.extend(
                release_blobs(engine, tenant=tenant, store=store, storage_keys=keys)
            )
        )
        releaser.start()
        # ... the release waits for the claim's row lock ...
        for _ in range(300):
            if _lock_waits(engine, tenant):
                break
            time.sleep(0.05)
        assert _lock_waits(engine, tenant) >= 1
        # ... and the import references the blob, then commits.
        document = create_document(importer, title="Imported meanwhile.txt")
        importer.revisions.add_many(
            [
                NewRevision(
                    document_id=document.id,
                    storage_key=key,
                    sha256=digest(b"contested bytes"),
                    size_bytes=15,
                    mime_type="text/plain",
                )
            ]
        )
        importer.commit()
    releaser.join(timeout=60)

    assert not releaser.is_alive()
    assert released == []
    assert store.get(key) == b"contested bytes"
    assert _registered(engine, tenant, key)


def test_a_missing_file_of_a_registered_blob_is_written_again(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    """A release that died between deleting the file and committing left a row without file."""
    _, key = upload(engine, tenant, user_id, store, b"rewritten")
    store.delete(key)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        stored = store_contents(uow, store, [content_of(b"rewritten")])
        uow.commit()

    assert stored.written == 1
    assert store.get(key) == b"rewritten"


def test_blob_keys_are_per_tenant(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    other = f"t{uuid.uuid4().hex[:12]}"
    provisioning.create_tenant(engine, other)
    try:
        _, mine = upload(engine, tenant, user_id, store, b"same everywhere")
        _, theirs = upload(engine, other, user_id, store, b"same everywhere")
    finally:
        provisioning.drop_tenant(engine, other)

    assert mine != theirs
    assert mine.startswith(f"{tenant}/sha256/")
    assert Path(store.path_of(mine)).is_file()


def test_a_blob_written_ahead_and_released_before_the_claim_is_written_again(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    """Files written ahead of the claim are not protected: the check after the claim decides."""
    purged, key = upload(engine, tenant, user_id, store, b"written ahead")
    keys = _trash_and_purge(engine, tenant, purged)  # registered, unreferenced
    store.delete(key)
    ahead = write_ahead(store, tenant, [content_of(b"written ahead"), content_of(b"new bytes")])
    assert ahead == {key, content_key(tenant, digest(b"new bytes"))}
    assert store.get(key) == b"written ahead"
    # A release deletes the first file between the writing ahead and the claim.
    assert release_blobs(engine, tenant=tenant, store=store, storage_keys=keys) == [key]
    assert not store.exists(key)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        contents = [content_of(b"written ahead"), content_of(b"new bytes")]
        stored = write_contents(store, claim_contents(uow, contents), contents, written_ahead=ahead)
        uow.commit()
    assert (stored.written, stored.already_stored) == (2, 0)
    assert store.get(key) == b"written ahead"


def test_writing_ahead_leaves_staged_contents_and_stored_blobs_alone(
    tenant: str, store: LocalBlobStore, tmp_path: Path
) -> None:
    source = tmp_path / "large.bin"
    source.write_bytes(b"staged bytes")
    with source.open("rb") as large:
        staged = store.stage(large)
    stored = content_of(b"stored already")
    store.put(content_key(tenant, stored.sha256), b"stored already")
    assert write_ahead(store, tenant, [staged, stored]) == frozenset()
    assert staged.staged is not None
    assert staged.staged.exists()
    assert not store.exists(content_key(tenant, staged.sha256))


def _trash(engine: Engine, tenant: str, *document_ids: uuid.UUID) -> None:
    with UnitOfWork(engine, tenant=tenant) as uow:
        for document_id in document_ids:
            document = uow.documents.get(document_id)
            uow.documents.soft_delete(document_id, version=document.version)
        uow.commit()


def test_the_trash_pages_newest_first_and_never_skips_or_repeats(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        folder = uow.folders.add(name="Old")
        in_folder = [create_document(uow, title=f"f{n}", folder_id=folder.id).id for n in range(5)]
        alone = [create_document(uow, title=f"a{n}").id for n in range(3)]
        kept = create_document(uow, title="kept").id
        uow.commit()
    _trash(engine, tenant, alone[0])
    with UnitOfWork(engine, tenant=tenant) as uow:
        delete_folder(uow, folder.id)  # five documents, one timestamp
        uow.commit()
    _trash(engine, tenant, alone[1], alone[2])

    pages: list[list[uuid.UUID]] = []
    with UnitOfWork(engine, tenant=tenant) as uow:
        after = None
        while page := uow.documents.trash(limit=2, after=after):
            pages.append([document.id for document in page])
            after = page[-1]
        everything = uow.documents.trash(limit=100)
        before_folder = uow.documents.trash(deleted_before=everything[-1].deleted_at)
        cutoff = uow.documents.trash(deleted_before=everything[2].deleted_at)

    seen = [document_id for page in pages for document_id in page]
    assert seen == [document.id for document in everything]
    assert len(seen) == len(set(seen)) == 8
    assert kept not in seen
    assert [len(page) for page in pages] == [2, 2, 2, 2]
    stamps = [document.deleted_at for document in everything]
    assert stamps == sorted(stamps, reverse=True)  # type: ignore[type-var]
    assert set(seen[:2]) == {alone[1], alone[2]}
    assert set(seen[2:7]) == set(in_folder)
    assert seen[7] == alone[0]
    assert before_folder == []
    assert [document.id for document in cutoff] == seen[7:]


def test_purge_trash_purges_what_is_old_enough_and_releases_unshared_blobs(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    unique, unique_key = upload(engine, tenant, user_id, store, b"only here")
    shared, shared_key = upload(engine, tenant, user_id, store, b"twice")
    live, _ = upload(engine, tenant, user_id, store, b"twice")
    _trash(engine, tenant, unique, shared)
    with UnitOfWork(engine, tenant=tenant) as uow:
        cutoff = max(d.deleted_at for d in uow.documents.trash() if d.deleted_at is not None)
    late, late_key = upload(engine, tenant, user_id, store, b"deleted later")
    _trash(engine, tenant, late)

    purged = purge_trash(
        engine, tenant=tenant, store=store, deleted_before=cutoff + timedelta(microseconds=1)
    )

    assert (purged.documents, purged.blobs_released) == (2, 1)
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert [d.id for d in uow.documents.trash()] == [late]
        assert uow.documents.get(live).deleted_at is None
        with pytest.raises(NotFound):
            uow.documents.get(unique, include_deleted=True)
    assert not store.exists(unique_key)
    assert store.exists(shared_key)
    assert store.exists(late_key)


def test_dms_trash_lists_refuses_without_yes_counts_and_purges(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore, capsys: Capture
) -> None:
    gone, key = upload(engine, tenant, user_id, store, b"bytes of the trash")
    _trash(engine, tenant, gone)
    url = engine.url.render_as_string(hide_password=False)
    purge = ["--database-url", url, "trash", "purge", "--tenant", tenant, "--older-than", "0s"]

    assert main(["--database-url", url, "trash", "list", "--tenant", tenant]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert main(purge) == 1
    refused = capsys.readouterr().err
    assert main([*purge, "--dry-run", "--json"]) == 0
    counted = json.loads(capsys.readouterr().out)
    with UnitOfWork(engine, tenant=tenant) as uow:
        still = [d.id for d in uow.documents.trash()]
    assert main([*purge, "--yes", "--blobs", str(store.root)]) == 0
    done = capsys.readouterr().out

    assert listed[0].startswith(f"{gone}\t")
    assert listed[1] == "1 document(s) in the trash shown"
    assert refused.startswith(f"refusing to purge 1 document(s) of tenant {tenant} deleted before ")
    assert refused.endswith(" without --yes\n")
    assert counted == {"tenant": tenant, "dry_run": True, "documents": 1, "blobs_released": 0}
    assert still == [gone]
    assert done.startswith(f"purged 1 document(s) of tenant {tenant} deleted before ")
    assert done.endswith("; 1 blob(s) released\n")
    assert not store.exists(key)


def test_a_sweep_through_the_application_role_sees_every_revision_of_a_restricted_tenant(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    """Blob upkeep acts as the operator: under access control, a sweep that saw only what
    everyone may see would take the blobs of every other revision for unreferenced."""
    _, key = upload(engine, tenant, user_id, store, b"private bytes")
    app = application_engine(engine, [tenant])
    try:
        with UnitOfWork(app, tenant=tenant, user_id=user_id) as uow:
            uow.access.revoke()  # everyone's root entry: nobody named sees nothing now
            uow.commit()

        assert release_blobs(app, tenant=tenant, store=store) == []
        assert store.get(key) == b"private bytes"
    finally:
        app.dispose()
