"""Blobs in an S3 bucket: ``dms import --blobs s3://...``, the jobs reading them, the trash.

Against a real S3-compatible server (SeaweedFS) started for the session.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.engine import Engine

from dms import DocumentQuery
from dms.blobs import purge_trash
from dms.cli import main
from dms.importing import import_tree
from dms.jobs import JobState
from dms.processing import INTEGRITY_FIELD
from dms.services import search_documents
from dms.storage import S3BlobStore, open_store
from dms.uow import UnitOfWork
from tests.importing.conftest import (
    imported_files,
    metadata_values,
    run_verifications,
    source_files,
)


def test_an_import_into_s3_arrives_intact_and_its_jobs_verify_it_there(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, s3_bucket: str
) -> None:
    location = f"s3://{s3_bucket}/documents"
    url = engine.url.render_as_string(hide_password=False)
    own = ["--tenant", tenant, "--user", str(user_id), "--blobs", location]

    status = main(["--database-url", url, "import", str(tree), *own, "--batch-size", "5"])

    assert status == 0
    store = open_store(location)
    expected = source_files(tree)
    imported = imported_files(engine, tenant)
    assert len(imported) == len(expected)
    for path, (_title, _sha256, _size, key, _mime) in imported.items():
        assert store.get(key) == expected[os.path.relpath(path, os.fsencode(tree.parent))]
    states = run_verifications(engine, tenant, store)
    assert states[JobState.DONE] == len(expected)
    assert states[JobState.DEAD] == 0
    with UnitOfWork(engine, tenant=tenant) as uow:
        integrity = uow.metadata.get_field_by_name(INTEGRITY_FIELD)
    verified = next(option.id for option in integrity.options if option.value == "verified")
    assert metadata_values(engine, tenant)["integrity"] == [verified] * len(expected)


def test_purging_the_trash_removes_the_objects_no_revision_has(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, s3_store: S3BlobStore
) -> None:
    import_tree(engine, tree, tenant=tenant, user_id=user_id, store=s3_store)
    with UnitOfWork(engine, tenant=tenant) as uow:
        documents = search_documents(uow, DocumentQuery(), limit=1000).items
        for document in documents:
            uow.documents.soft_delete(document.id, version=document.version)
        uow.commit()
    assert list(s3_store.objects(f"{tenant}/"))

    purged = purge_trash(
        engine, tenant=tenant, store=s3_store, deleted_before=datetime.now(timezone.utc)
    )

    assert purged.documents == len(documents)
    assert purged.blobs_released > 0
    assert list(s3_store.objects(f"{tenant}/")) == []
