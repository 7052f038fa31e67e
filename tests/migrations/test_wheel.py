"""Operators who install the built wheel run plain ``alembic`` and ``dms`` outside the repository.

The wheel is built once for the module and unpacked into a folder of its own; each command runs
in a folder outside the repository with that folder first on ``PYTHONPATH``, so ``import dms``
finds the installed copy (its migrations live in ``dms/_alembic``), never the checkout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import URL, Engine

from dms import migrations
from dms.config import SHARED_SCHEMA
from tests.migrations.fingerprint import REPO_ROOT, alembic_env, revisions

pytestmark = pytest.mark.slow

HEAD = migrations.head_revision()

#: The smallest alembic.ini for an installed dms (docs/operations.md).
MINIMAL_INI = "[alembic]\nscript_location = dms:_alembic\n"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built wheel, unpacked into a folder of its own."""
    wheels = tmp_path_factory.mktemp("wheels")
    target = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(REPO_ROOT)], check=True)
    (wheel,) = wheels.glob("dms-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    return target


@pytest.fixture
def operator_folder(tmp_path: Path) -> Path:
    """A folder outside the repository, with the minimal alembic.ini."""
    (tmp_path / "alembic.ini").write_text(MINIMAL_INI)
    return tmp_path


def _run(installed: Path, folder: Path, url: URL, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=folder,
        env={**alembic_env(url), "PYTHONPATH": str(installed)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_commands_use_the_installed_copy(
    installed: Path, operator_folder: Path, db: Engine, empty_database_url: URL
) -> None:
    found = _run(
        installed, operator_folder, empty_database_url, "-c", "import dms; print(dms.__file__)"
    )

    assert Path(found.stdout.strip()).is_relative_to(installed), found


def test_plain_alembic_with_the_minimal_ini(
    installed: Path, operator_folder: Path, db: Engine, empty_database_url: URL
) -> None:
    up = _run(installed, operator_folder, empty_database_url, "-m", "alembic", "upgrade", "head")
    current = _run(installed, operator_folder, empty_database_url, "-m", "alembic", "current")
    down = _run(
        installed, operator_folder, empty_database_url, "-m", "alembic", "downgrade", "base"
    )

    assert up.returncode == 0, up.stderr
    assert f"-> {HEAD}," in up.stderr  # alembic's progress lines, as with the full ini
    assert current.stdout.strip() == f"{HEAD} (head)", current.stderr
    assert down.returncode == 0, down.stderr
    assert revisions(db, SHARED_SCHEMA) == {SHARED_SCHEMA: None}


def test_dms_alembic_and_dms_migrate_need_no_ini(
    installed: Path, tmp_path: Path, db: Engine, empty_database_url: URL
) -> None:
    dms = ("-m", "dms")
    up = _run(installed, tmp_path, empty_database_url, *dms, "alembic", "upgrade", "head")
    down = _run(installed, tmp_path, empty_database_url, *dms, "alembic", "downgrade", "-1")
    migrate = _run(installed, tmp_path, empty_database_url, *dms, "migrate")
    typo = _run(installed, tmp_path, empty_database_url, *dms, "alembic", "upgrade", "nope")

    assert up.returncode == 0, up.stderr
    assert f"-> {HEAD}," in up.stderr
    assert down.returncode == 0, down.stderr
    assert migrate.returncode == 0, migrate.stderr
    assert revisions(db, SHARED_SCHEMA) == {SHARED_SCHEMA: HEAD}
    assert typo.returncode == 1
    assert typo.stderr.splitlines()[-1] == "error: Can't locate revision identified by 'nope'"
    assert "Traceback" not in typo.stderr
