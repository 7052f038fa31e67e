"""Every code block of the README runs as written and prints what its comments say.

The README is read section by section. Python blocks run with ``exec`` and ``# ...`` comments
after ``print(...)`` are their expected output; shell lines that start with ``dms`` or
``alembic`` run in a subprocess from the repository's root and must exit 0. Each of the
sections :data:`SELF_CONTAINED` runs on a new database, as a reader would on a new server;
:data:`CHAINED` sections continue on one database (their Python blocks share one namespace).
The lines of :data:`ELSEWHERE` sections are commands that CI runs itself (``pip``, ``tox``) or
benchmarks: the test only checks that nothing else has crept in there.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from dms.testing import temporary_database
from dms.users import create_users_stand_in
from tests.conftest import LONG_TEST_SECONDS

README = Path(__file__).resolve().parents[2] / "README.md"
REPO_ROOT = README.parent

SELF_CONTAINED = ("Using a real server", "The library in brief")
CHAINED = (
    "Using the library",
    "Jobs",
    "Importing a file tree",
    "Finding documents by what they say",
    "Who changed what",
    "Migrations",
)
ELSEWHERE = ("Quick start", "Tests", "Benchmarks")
#: How lines of ELSEWHERE sections may start: the quick start and tox (.ci/run runs them
#: as written), benchmarks.
ELSEWHERE_COMMANDS = (
    "pip install",
    "dms demo",
    "tox",
    "DMS_TEST_DATABASE_URL=",
    "python -m bench",
    "python bench/",
)
_DATABASE_EXPORT = "export DMS_DATABASE_URL="
#: Commands that run until stopped: sent SIGTERM after this many seconds, then must exit 0.
UNTIL_STOPPED = {"dms worker": 3.0}


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language and its text."""

    language: str
    code: str


def sections() -> dict[str, list[Block]]:
    """The README's code blocks by ``##`` section."""
    found: dict[str, list[Block]] = {}
    for part in re.split(r"^## ", README.read_text(), flags=re.MULTILINE)[1:]:
        title, body = part.split("\n", 1)
        found[title.strip()] = [
            Block(language, code)
            for language, code in re.findall(r"```(\w+)\n(.*?)```", body, re.DOTALL)
        ]
    return found


def commands(block: Block) -> list[str]:
    """The command lines of a shell block, comments cut off."""
    lines = (line.split("  #", 1)[0].strip() for line in block.code.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def expected_output(block: Block) -> list[str]:
    """What the ``print`` lines of a Python block say they print."""
    return [
        line.split("# ", 1)[1]
        for line in block.code.splitlines()
        if line.lstrip().startswith("print(") and "# " in line
    ]


@pytest.fixture
def readme_database(server_url: URL) -> Iterator[URL]:
    """A new database with the users stand-in, as the embedded default server has."""
    with temporary_database(server_url, prefix="dms_readme") as url:
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        create_users_stand_in(engine)
        engine.dispose()
        yield url


def run_blocks(
    blocks: list[Block],
    url: URL,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> int:
    """Run ``blocks`` in order on ``url``; return how many blocks ran."""
    rendered = url.render_as_string(hide_password=False)
    monkeypatch.setenv("DMS_DATABASE_URL", rendered)
    namespace: dict[str, object] = {"__name__": "readme"}
    try:
        for block in blocks:
            if block.language == "python":
                capsys.readouterr()
                exec(compile(block.code, str(README), "exec"), namespace)  # noqa: S102 -- README
                assert capsys.readouterr().out.splitlines() == expected_output(block)
            elif block.language == "sh":
                for line in commands(block):
                    run_command(line, rendered)
    finally:  # also when a block fails: its pooled connections must not outlive the test
        engine = namespace.get("engine")
        if isinstance(engine, sa.Engine):
            engine.dispose()
    return len(blocks)


def run_command(line: str, url: str) -> None:
    """Run one README command line; it must exit 0."""
    if line.startswith(_DATABASE_EXPORT):
        return  # the example server's URL: this test names its own database instead
    assert line.startswith(("dms ", "alembic ")), f"the README runs {line!r}: test it here"
    executable, *arguments = line.split()
    program = [sys.executable, "-m", "dms" if executable == "dms" else "alembic", *arguments]
    env = {**os.environ, "DMS_DATABASE_URL": url}
    until_stopped = next((s for c, s in UNTIL_STOPPED.items() if line.startswith(c)), None)
    process = subprocess.Popen(
        program, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=until_stopped or 120)
    except subprocess.TimeoutExpired:
        assert until_stopped is not None, f"{line!r} did not finish"
        # SIGTERM before the command handles it would kill it, not stop it: on a loaded
        # machine the import alone can take longer than the wait above.
        wait_until_it_catches_sigterm(process.pid)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, f"{line!r} exited {process.returncode}: {out}{err}"


def wait_until_it_catches_sigterm(pid: int, timeout: float = 60.0) -> None:
    """Wait until process ``pid`` has a handler for SIGTERM (Linux: ``SigCgt`` in its status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.05)
    pytest.fail(f"process {pid} installed no SIGTERM handler within {timeout} s")


@pytest.mark.parametrize("section", SELF_CONTAINED)
def test_self_contained_sections_run_on_a_new_database(
    section: str,
    readme_database: URL,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_blocks(sections()[section], readme_database, monkeypatch, capsys) >= 1


@pytest.mark.slow
@pytest.mark.timeout(LONG_TEST_SECONDS)  # every command of six sections, one after another
def test_chained_sections_run_in_order_on_one_database(
    readme_database: URL, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = sections()
    blocks = [block for title in CHAINED for block in found[title]]

    assert run_blocks(blocks, readme_database, monkeypatch, capsys) == len(blocks) >= 4


def test_every_section_with_code_is_run_here_or_elsewhere() -> None:
    with_code = {title for title, blocks in sections().items() if blocks}

    assert with_code == set(SELF_CONTAINED) | set(CHAINED) | set(ELSEWHERE)


@pytest.mark.parametrize("section", ELSEWHERE)
def test_sections_run_elsewhere_hold_only_ci_and_benchmark_commands(section: str) -> None:
    lines = [line for block in sections()[section] for line in commands(block)]

    assert lines
    for line in lines:
        parts = [part.strip() for part in line.split("&&")]
        assert all(part.startswith(ELSEWHERE_COMMANDS) for part in parts), line
