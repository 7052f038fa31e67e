"""An import killed with SIGKILL mid-batch, then resumed with ``dms import``: nothing twice."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.cli import main
from dms.jobs import JobState
from dms.jobs.tables import processing_jobs
from dms.processing import VERIFY_REVISION
from dms.schema import tenant as t
from dms.storage import LocalBlobStore
from tests.conftest import LONG_TEST_SECONDS, without_role_warning
from tests.importing.conftest import digest, imported_files, run_verifications, source_files

REPO = Path(__file__).resolve().parents[2]


def _make_files(root: Path, count: int) -> None:
    for n in range(count):
        folder = root / f"folder {n % 4}" / ("sub" if n % 3 else "")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"file {n:03}.txt").write_bytes(f"content of file {n}\n".encode() * (n + 1))
    (root / "folder 0" / "copy.txt").write_bytes(b"content of file 0\n")  # shares a blob


def _documents(engine: Engine, tenant: str) -> int:
    with engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(t.documents)
        return int(tenancy.route(conn, tenant).scalar(query) or 0)


def _verification_jobs(engine: Engine, tenant: str) -> list[str]:
    with engine.connect() as conn:
        query = sa.select(processing_jobs.c.payload["revision_id"].astext).where(
            processing_jobs.c.tenant == tenant, processing_jobs.c.kind == VERIFY_REVISION
        )
        return list(conn.scalars(query))


@pytest.mark.faults
@pytest.mark.slow
def test_import_killed_mid_batch_resumes_and_imports_nothing_twice(
    engine: Engine, tenant: str, user_id: uuid.UUID, tmp_path: Path
) -> None:
    source, blobs = tmp_path / "share", tmp_path / "blobs"
    _make_files(source, 40)
    url = engine.url.render_as_string(hide_password=False)
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.importing.child_import",
            url,
            tenant,
            str(user_id),
            str(source),
            str(blobs),
            "3",
        ],
        cwd=REPO,
    )
    assert child.wait(timeout=120) == -signal.SIGKILL
    after_kill = _documents(engine, tenant)
    assert after_kill == 10  # two whole batches of five; the third died before its commit

    status = main(
        [
            "--database-url",
            url,
            "import",
            str(source),
            "--tenant",
            tenant,
            "--user",
            str(user_id),
            "--blobs",
            str(blobs),
            "--batch-size",
            "5",
        ]
    )

    expected = source_files(source)
    imported = imported_files(engine, tenant)
    store = LocalBlobStore(blobs, durable=False)
    assert status == 0
    assert _documents(engine, tenant) == len(expected) == len(imported)
    base = os.fsencode(source.parent)
    for path, (_title, sha256, size, key, _mime) in imported.items():
        data = expected[os.path.relpath(path, base)]
        assert (sha256, size, store.get(key)) == (digest(data), len(data), data)
    revision_ids = _verification_jobs(engine, tenant)
    assert len(revision_ids) == len(set(revision_ids)) == len(expected)
    states = run_verifications(engine, tenant, store)
    assert (states[JobState.DONE], states[JobState.DEAD]) == (len(expected), 0)


@pytest.mark.faults
@pytest.mark.timeout(LONG_TEST_SECONDS)  # two waits of 60 s, then the whole import resumed
@pytest.mark.usefixtures("ctrl_c_as_in_a_terminal")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_import_stopped_by_a_signal_says_how_far_it_got_in_one_line(
    engine: Engine, tenant: str, user_id: uuid.UUID, tmp_path: Path, signum: int
) -> None:
    source, blobs = tmp_path / "share", tmp_path / "blobs"
    _make_files(source, 1000)
    total = len(source_files(source))
    url = engine.url.render_as_string(hide_password=False)
    command = ["import", str(source), "--tenant", tenant, "--user", str(user_id)]
    command += ["--blobs", str(blobs), "--batch-size", "1"]
    child = subprocess.Popen(
        [sys.executable, "-m", "dms", "--database-url", url, *command],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The first committed batch: the command is inside the import, its handlers installed.
    deadline = time.monotonic() + 60
    while _documents(engine, tenant) == 0 and child.poll() is None:
        assert time.monotonic() < deadline, "the import never committed a batch"
        time.sleep(0.01)
    assert child.poll() is None, "the import ended before the test could stop it"
    child.send_signal(signum)
    out, err = child.communicate(timeout=60)
    err = without_role_warning(err)
    stopped_at = _documents(engine, tenant)
    resumed = main(["--database-url", url, *command])

    line = re.fullmatch(
        rf"interrupted after ([\d,]+) of {total:,} files: run the same dms import again to resume "
        r"\(nothing is imported twice\)\n",
        err,
    )
    assert child.returncode == 128 + signum, err  # 130 after Ctrl-C, 143 after SIGTERM
    assert out == ""
    assert line is not None, err
    # What was committed, give or take the batch whose commit the signal followed.
    assert stopped_at - 1 <= int(line.group(1).replace(",", "")) <= stopped_at
    assert 0 < stopped_at < total
    assert resumed == 0
    assert _documents(engine, tenant) == total
