"""The README's library example runs as written and prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    section = README.read_text().split("## Using the library", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the README lost its library example"
    return match.group(1)


def test_readme_example_runs(
    empty_database_url: URL, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DMS_DATABASE_URL", empty_database_url.render_as_string(hide_password=False))
    code = _example()
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 -- our own README
    engine = namespace["engine"]
    engine.dispose()  # type: ignore[attr-defined]

    expected = [
        line.split("# ", 1)[1] for line in code.splitlines() if line.startswith("    print(")
    ]
    assert capsys.readouterr().out.splitlines() == expected
