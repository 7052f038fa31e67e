"""The blob store's lifecycle: a dropped tenant's blobs released, ``dms blobs gc`` removing what
no tenant needs (safely while a writer claims), and a wrong store failing loudly."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from dms import jobs, provisioning
from dms.blobs import collect_garbage, release_dropped_tenant, store_contents
from dms.cli import main
from dms.domain import Blob, NewRevision
from dms.errors import InvalidTenantName, TenantExists, TenantNotFound, ValidationError
from dms.jobs import JobState
from dms.processing import (
    VERIFY_REVISION,
    define_processing_fields,
    handlers,
)
from dms.services import create_document
from dms.storage import LocalBlobStore, content_key
from dms.testing.blocking import row_lock_waits
from dms.uow import UnitOfWork
from tests.conftest import new_slug
from tests.importing.conftest import content_of, digest, upload

Capture = pytest.CaptureFixture[str]


def _cli(engine: Engine, *arguments: str) -> int:
    return main(["--database-url", engine.url.render_as_string(hide_password=False), *arguments])


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs", durable=False)


def test_dropping_a_tenant_releases_its_blobs(
    engine: Engine, user_id: uuid.UUID, store: LocalBlobStore, capsys: Capture
) -> None:
    doomed, kept = new_slug(), new_slug()
    for slug in (doomed, kept):
        provisioning.create_tenant(engine, slug)
    doomed_keys = [upload(engine, doomed, user_id, store, b"doomed %d" % n)[1] for n in (1, 2)]
    kept_key = upload(engine, kept, user_id, store, b"kept")[1]

    drop = ["tenants", "drop", doomed, "nobody_here", "--blobs", str(store.root)]

    assert _cli(engine, *drop, "--dry-run") == 0
    would = capsys.readouterr().out
    assert all(store.exists(key) for key in doomed_keys)
    status = _cli(engine, *drop, "--yes")

    assert would == f"would drop 1 tenant(s) and 2 blob(s) from {store.root}; 1 not found\n"
    assert status == 1  # one name was not found
    assert capsys.readouterr().out == "dropped 1 tenant(s); 1 not found; 2 blob(s) released\n"
    assert not any(store.exists(key) for key in doomed_keys)
    assert list(store.objects(f"{doomed}/")) == []
    assert store.exists(kept_key)
    provisioning.drop_tenant(engine, kept)


def test_the_blobs_of_a_registered_tenant_are_never_released_as_dropped(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    key = upload(engine, tenant, user_id, store, b"still in use")[1]

    with pytest.raises(TenantExists, match="registered"):
        release_dropped_tenant(engine, store, tenant)

    assert store.exists(key)


def test_gc_removes_what_no_tenant_needs_and_keeps_every_referenced_blob(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore, capsys: Capture
) -> None:
    referenced = upload(engine, tenant, user_id, store, b"referenced")[1]
    # A writer that died after its files, before its commit: a file no registry row knows.
    unregistered = content_key(tenant, digest(b"written, never committed"))
    store.put(unregistered, b"written, never committed")
    # A release that never ran: a registered blob no revision references.
    unreferenced = content_key(tenant, digest(b"claimed, never used"))
    with UnitOfWork(engine, tenant=tenant) as uow:
        store_contents(uow, store, [content_of(b"claimed, never used")])
        uow.commit()
    # What a dropped tenant left (its name is registered by no one).
    gone_tenant = new_slug()
    orphan = content_key(gone_tenant, digest(b"orphan"))
    store.put(orphan, b"orphan")
    # An import killed mid-file, long ago; and one staging right now.
    old = store.stage(io.BytesIO(b"killed import"))
    fresh = store.stage(io.BytesIO(b"running import"))
    assert old.staged is not None
    assert fresh.staged is not None
    os.utime(old.staged, (time.time() - 7200, time.time() - 7200))
    gc = ["blobs", "gc", "--blobs", str(store.root), "--tenant", tenant]

    assert _cli(engine, *gc) == 1
    refused = capsys.readouterr().err
    assert _cli(engine, *gc, "--dry-run", "--json") == 0
    counted = json.loads(capsys.readouterr().out)
    assert all(store.exists(k) for k in (referenced, unregistered, unreferenced, orphan))
    assert _cli(engine, *gc, "--yes") == 0
    done = capsys.readouterr().out

    assert refused == (
        "refusing to remove 0 blob(s) of 0 dropped tenant(s), 1 unregistered and 1 "
        f"unreferenced blob(s), 1 staging file(s) from {store.root} without --yes\n"
    )
    assert counted == {
        "store": str(store.root),
        "tenants": [tenant],
        "dry_run": True,
        "dropped_tenants": [],
        "unregistered": 1,
        "unreferenced": 1,
        "staging": 1,
    }
    assert done.startswith("removed 0 blob(s) of 0 dropped tenant(s), 1 unregistered and 1 ")
    assert store.get(referenced) == b"referenced"
    assert not store.exists(unregistered)
    assert not store.exists(unreferenced)
    assert store.exists(orphan)  # --tenant: only that tenant's files
    assert not old.staged.exists()
    assert fresh.staged.exists()
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.blobs.registered_among([unregistered, unreferenced]) == set()

    # Without --tenant, the dropped tenant's blobs go too.
    garbage = collect_garbage(engine, store, tenants=None)
    assert garbage.dropped_tenants == {gone_tenant: 1}
    assert not store.exists(orphan)
    assert store.exists(referenced)


def test_gc_waits_for_a_writer_that_claimed_an_unregistered_file_and_keeps_it(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    data = b"written ahead by an import"
    key = content_key(tenant, digest(data))
    store.put(key, data)  # a file written ahead, not yet claimed
    results: list[object] = []
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as writer:
        writer.blobs.claim([Blob(storage_key=key, sha256=digest(data), size_bytes=len(data))])
        collector = threading.Thread(
            target=lambda: results.append(collect_garbage(engine, store, tenants=[tenant]))
        )
        collector.start()
        for _ in range(300):  # the collector's registration waits for the writer's claim
            with engine.connect() as conn:
                if row_lock_waits(conn):
                    break
            time.sleep(0.05)
        document = create_document(writer, title="written meanwhile.txt")
        writer.revisions.add_many(
            [
                NewRevision(
                    document_id=document.id,
                    storage_key=key,
                    sha256=digest(data),
                    size_bytes=len(data),
                    mime_type="text/plain",
                )
            ]
        )
        writer.commit()
    collector.join(timeout=60)

    assert not collector.is_alive()
    assert len(results) == 1
    assert store.get(key) == data


def test_a_worker_on_the_wrong_store_fails_loudly_instead_of_marking_files_missing(
    engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore, tmp_path: Path
) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        define_processing_fields(uow)
        uow.commit()
    for n in range(3):
        upload(engine, tenant, user_id, store, b"file %d" % n, verify=True)[1]
    wrong = LocalBlobStore(tmp_path / "elsewhere")

    with jobs.Worker(
        engine,
        {VERIFY_REVISION: handlers(wrong)[VERIFY_REVISION]},
        jobs.WorkerConfig(kinds=[VERIFY_REVISION], poll_seconds=0.05),
        unit_of_work=UnitOfWork.factory(engine),
    ):
        failed = _wait_for_attempts(engine, tenant)

    assert failed, "no verification job was attempted"
    for job in failed:
        assert job.state is not JobState.DONE
        assert f"the blob store {wrong.root} holds neither the blob" in (job.last_error or "")


def _wait_for_attempts(engine: Engine, tenant: str) -> list[jobs.Job]:
    for _ in range(400):
        with engine.connect() as conn:
            listed = jobs.list_jobs(conn, tenant=tenant, kind=VERIFY_REVISION)
        if listed and all(job.attempts >= 1 and job.last_error for job in listed):
            return listed
        time.sleep(0.05)
    return []


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"tenants": "acme"}, ValidationError),
        ({"tenants": [5]}, InvalidTenantName),
        ({"tenants": ["no_such_tenant_here"]}, TenantNotFound),
        ({"staging_older_than": 3600}, ValidationError),
        ({"staging_older_than": timedelta(seconds=-1)}, ValidationError),
        ({"dry_run": "no"}, ValidationError),
    ],
)
def test_gc_refuses_bad_arguments_before_anything_changes(
    engine: Engine, tenant: str, store: LocalBlobStore, arguments: dict[str, object], error: type
) -> None:
    unregistered = content_key(tenant, digest(b"never claimed"))
    store.put(unregistered, b"never claimed")
    named = {"tenants": [tenant], **arguments}

    with pytest.raises(error):
        collect_garbage(engine, store, **named)  # type: ignore[arg-type]

    assert store.exists(unregistered)
