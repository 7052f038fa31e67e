"""The embedded server on a machine that never ran dms: first use races, status and stop.

Each test starts a server of its own in a new data folder (a few seconds) and stops it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from dms import embedded
from dms.config import Settings
from dms.errors import ConfigurationError

pytestmark = pytest.mark.slow

#: Processes that use a new data folder at the same moment.
RACERS = 4


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data folder that does not exist yet; its server is stopped after the test.

    Not under pytest's ``tmp_path``: every pytest session that starts (another xdist worker,
    another run on the machine) makes its root private again (0700), and the server runs as
    the wheel's own user when we are root.
    """
    parent = Path(tempfile.mkdtemp(prefix="dms-embedded-test-"))
    folder = parent / "never-used" / "dms"
    try:
        yield folder
    finally:
        embedded.stop(folder)
        shutil.rmtree(parent, ignore_errors=True)


def _environment(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMS_")}
    return {**env, "DMS_DATA_DIR": str(data_dir)}


def test_concurrent_first_use_of_a_new_data_folder_starts_one_server(data_dir: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from dms import embedded; "
        "from dms.config import Settings; "
        "print(embedded.start(Path(sys.argv[1]), settings=Settings.from_env()))"
    )
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(data_dir)],
            env=_environment(data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RACERS)
    ]
    results = [racer.communicate(timeout=120) for racer in racers]

    assert [racer.returncode for racer in racers] == [0] * RACERS, results
    urls = {out.strip() for out, _ in results}
    assert len(urls) == 1
    engine = sa.create_engine(embedded.start(data_dir, settings=Settings.from_env()))
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.to_regclass("public.users"))) == "users"
    engine.dispose()


def test_concurrent_dms_status_on_a_new_data_folder_gives_one_answer(data_dir: Path) -> None:
    racers = [
        subprocess.Popen(
            [sys.executable, "-m", "dms.cli", "status"],
            env=_environment(data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RACERS)
    ]
    results = [racer.communicate(timeout=120) for racer in racers]

    for out, err in results:
        assert "Traceback" not in err, err
        assert "shared schema: base (not at head)" in out
    assert {racer.returncode for racer in racers} == {1}


def test_status_and_stop(data_dir: Path) -> None:
    assert embedded.status(data_dir).running is False
    assert embedded.stop(data_dir) is False

    url = embedded.start(data_dir, settings=Settings.from_env())
    running = embedded.status(data_dir)
    assert running.running
    assert running.initialised
    assert running.pid is not None

    assert embedded.stop(data_dir) is True
    stopped = embedded.status(data_dir)
    assert (stopped.running, stopped.pid, stopped.initialised) == (False, None, True)
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    with pytest.raises(sa.exc.OperationalError):
        engine.connect()


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_a_data_folder_that_cannot_be_one_is_one_error(tmp_path: Path, where: str) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("not a folder")
    folder = a_file if where == "a file" else a_file / "dms"

    with pytest.raises(ConfigurationError, match=f"cannot use the data folder {folder}: "):
        embedded.start(folder, settings=Settings())
    with pytest.raises(ConfigurationError, match=f"cannot use the data folder {folder}: "):
        embedded.stop(folder)
    found = embedded.status(folder)

    assert (found.initialised, found.running) == (False, False)
    assert a_file.read_text() == "not a folder"


def test_the_command_says_so_in_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("")
    env = {**os.environ, "DMS_DATA_DIR": str(a_file / "dms"), "DMS_DATABASE_URL": ""}

    done = subprocess.run(
        [sys.executable, "-m", "dms", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 1
    assert done.stderr == f"error: cannot use the data folder {a_file / 'dms'}: Not a directory\n"
