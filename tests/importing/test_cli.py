"""``dms import``: the report, the exit status, and bad input refused before any write."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.cli import main
from dms.schema import tenant as t
from dms.uow import UnitOfWork
from tests.importing.conftest import source_files


def _run(engine: Engine, *arguments: str) -> int:
    url = engine.url.render_as_string(hide_password=False)
    return main(["--database-url", url, "import", *arguments])


@pytest.fixture
def rows(engine: Engine, tenant: str) -> Callable[[], dict[str, int]]:
    """Counts of the tenant's rows that an import writes, by table."""
    return lambda: _rows(engine, tenant)


@pytest.fixture
def run_import(
    app_engine: Engine, tenant: str, user_id: uuid.UUID, tmp_path: Path
) -> Callable[..., int]:
    """``dms import PATH --tenant T --user U --blobs B ARGUMENTS...`` as the application role
    (what a deployment imports as); its exit status."""

    def run(path: Path, *arguments: str) -> int:
        own = ["--tenant", tenant, "--user", str(user_id), "--blobs", str(tmp_path / "blobs")]
        return _run(app_engine, str(path), *own, *arguments)

    return run


def _rows(engine: Engine, tenant: str) -> dict[str, int]:
    with engine.connect() as conn:
        routed = tenancy.route(conn, tenant)
        return {
            table.name: int(routed.scalar(sa.select(sa.func.count()).select_from(table)) or 0)
            for table in (t.folders, t.documents, t.file_revisions, t.blobs, t.import_provenance)
        }


def test_json_report_of_an_import_into_a_folder_path(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    tree: Path,
    run_import: Callable[..., int],
) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        archive = uow.folders.add(name="Archive")
        uow.folders.add(name="2026", parent_id=archive.id)
        uow.commit()
    status, out, _ = _captured(run_import, tree, "--into", "archive/2026", "--json")
    report = json.loads(out)

    assert status == 0
    assert report["complete"] is True
    assert report["counts"]["documents_created"] == len(source_files(tree))
    # One verification per file, one text extraction per batch of the import.
    files, batches = len(source_files(tree)), report["counts"]["batches"]
    assert report["counts"]["jobs_enqueued"] == files + batches
    assert {e["path"] for e in report["renamed"]} >= {"share/docs/index.html"}
    assert set(report["timings"]) == {
        "reading_and_hashing",
        "blob_writes",
        "database",
        "waiting_for_reads",
        "waiting_for_blobs",
        "total",
    }
    with UnitOfWork(engine, tenant=tenant) as uow:
        [year] = uow.folders.children(archive.id)
        assert [f.name for f in uow.folders.children(year.id)] == ["share"]


def test_refused_names_make_the_exit_status_one_and_are_listed(
    tree: Path, run_import: Callable[..., int]
) -> None:
    status, out, _ = _captured(run_import, tree, "--names", "refuse")
    lines = out.splitlines()

    assert status == 1
    assert lines[0].startswith("imported ")
    assert "skipped\tfile\t'share/docs/index.html'" in "\n".join(lines)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--into", "No/Such"], "no folder 'No'"),
        (["--into", str(uuid.UUID(int=1))], "does not exist"),
        (["--user", str(uuid.UUID(int=2))], "users"),
    ],
)
def test_bad_target_is_one_line_and_writes_nothing(
    rows: Callable[[], dict[str, int]],
    tree: Path,
    run_import: Callable[..., int],
    arguments: list[str],
    message: str,
) -> None:
    before = rows()

    status, _, err = _captured(run_import, tree, *arguments)

    assert status == 1
    assert err.startswith("error: ")
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert rows() == before


def test_unknown_tenant_and_missing_path_are_refused(
    app_engine: Engine, user_id: uuid.UUID, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = _run(
        app_engine, str(tree / "nowhere"), "--tenant", "nosuchtenant", "--user", str(user_id)
    )
    unknown = _run(app_engine, str(tree), "--tenant", "nosuchtenant", "--user", str(user_id))
    err = capsys.readouterr().err.splitlines()

    assert (missing, unknown) == (1, 1)
    assert "No such file or directory" in err[0]
    assert "tenant 'nosuchtenant'" in err[1]


def _captured(run: Callable[..., int], *arguments: object) -> tuple[int, str, str]:
    """Run ``run`` and return its status with what it printed on stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run(*arguments)
    return status, out.getvalue(), err.getvalue()
