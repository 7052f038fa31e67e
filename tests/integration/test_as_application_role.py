"""What a deployment runs day to day works under the application's role (docs/operations.md,
"Roles: who owns what"): the worker's handlers (text extraction, content verification), a
content search, and the operator's commands on the audit trail, the trash and the blob store,
each with exit status 0 and nothing on stderr: no traceback, no missing grant, no warning.

The role is made as a deployment makes it (:func:`dms.testing.roles.application_engine`, which
runs ``dms roles setup``); the tenant is created by the suite's owner engine.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from dms import jobs
from dms.cli import main
from dms.domain import DocumentQuery
from dms.errors import NotFound
from dms.jobs import JobState, Worker
from dms.processing import define_processing_fields, enqueue_verification, handlers
from dms.services import search_documents
from dms.storage import LocalBlobStore
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork
from tests.jobs.test_extraction_jobs import upload

WORD = "quokka"


@pytest.fixture
def app_engine(engine: Engine) -> Iterator[Engine]:
    """The application's role, set up as a deployment does."""
    application = application_engine(engine)
    yield application
    application.dispose()


@pytest.fixture
def store(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs", durable=False)


def _work_off(app: Engine, tenant: str, store: LocalBlobStore) -> jobs.QueueStats:
    """Run a worker on the application's role until no job of ``tenant`` is left to run."""
    config = jobs.WorkerConfig(concurrency=2, poll_seconds=0.1)
    with Worker(app, handlers(store), config, unit_of_work=UnitOfWork.factory(app)):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with app.connect() as conn:
                stats = jobs.stats(conn, tenant=tenant)
            if stats.total(JobState.QUEUED) + stats.total(JobState.RUNNING) == 0:
                return stats
            time.sleep(0.05)
    raise AssertionError("the jobs did not finish in 60 s")


def test_the_workers_handlers_and_search_run_as_the_application_role(
    app_engine: Engine, tenant: str, user_id: uuid.UUID, store: LocalBlobStore
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, system="setup") as uow:
        define_processing_fields(uow)  # what verification records its outcome in
        uow.commit()
    document, revision = upload(app_engine, tenant, user_id, store, f"a {WORD}".encode())
    with UnitOfWork(app_engine, tenant=tenant, user_id=user_id) as uow:
        enqueue_verification(uow, revision)
        uow.commit()

    stats = _work_off(app_engine, tenant, store)
    with UnitOfWork(app_engine, tenant=tenant, user_id=user_id) as uow:
        found = search_documents(uow, DocumentQuery(text=WORD)).items

    assert stats.total(JobState.DEAD) == 0
    assert stats.total(JobState.DONE) >= 2  # its text extracted, its content verified
    assert [d.id for d in found] == [document.id]


def _dms(app: Engine, *arguments: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    url = app.url.render_as_string(hide_password=False)
    status = main(["--database-url", url, *arguments])
    out, err = capsys.readouterr()
    said = f"dms {' '.join(arguments)}: exit {status}\n{err}"
    assert status == 0, said
    # A summary line may go to stderr; a refusal, a warning or a traceback may not.
    assert not any(word in err for word in ("Traceback", "error", "WARNING", "permission")), said
    return out, err


def test_operator_commands_run_as_the_application_role(
    app_engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    store: LocalBlobStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kept = upload(app_engine, tenant, user_id, store, b"kept")[0].id
    trashed = upload(app_engine, tenant, user_id, store, b"trashed")[0].id
    with UnitOfWork(app_engine, tenant=tenant, user_id=user_id) as uow:
        uow.documents.soft_delete(trashed, version=uow.documents.get(trashed).version)
        uow.commit()
    blobs = ["--blobs", str(store.root)]
    capsys.readouterr()

    _dms(app_engine, "audit", "seal", "--tenant", tenant, capsys=capsys)
    verified, _ = _dms(app_engine, "audit", "verify", "--tenant", tenant, capsys=capsys)
    head, _ = _dms(app_engine, "audit", "head", "--tenant", tenant, capsys=capsys)
    exported, _ = _dms(app_engine, "audit", "export", "--tenant", tenant, capsys=capsys)
    listed, _ = _dms(app_engine, "trash", "list", "--tenant", tenant, capsys=capsys)
    purged, _ = _dms(
        app_engine,
        "trash", "purge", "--tenant", tenant, "--older-than", "0s", *blobs, "--yes", "--json",
        capsys=capsys,
    )  # fmt: skip
    _dms(app_engine, "blobs", "gc", "--tenant", tenant, *blobs, "--yes", capsys=capsys)
    pruned, _ = _dms(
        app_engine, "audit", "prune", "--tenant", tenant, "--older-than", "0s", "--yes", "--json",
        capsys=capsys,
    )  # fmt: skip
    after, _ = _dms(app_engine, "audit", "verify", "--tenant", tenant, capsys=capsys)

    assert "intact" in verified
    assert head.strip().split(":")[0].isdigit()
    assert {json.loads(line)["object_type"] for line in exported.splitlines()} >= {"document"}
    assert str(trashed) in listed
    assert json.loads(purged)["documents"] == 1
    assert json.loads(pruned)["tenants"][0]["pruned"] > 0
    assert "intact" in after
    with UnitOfWork(app_engine, tenant=tenant, user_id=user_id) as uow:
        assert uow.documents.get(kept).id == kept
        with pytest.raises(NotFound):
            uow.documents.get(trashed, include_deleted=True)
