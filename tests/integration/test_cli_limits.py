"""``dms jobs limit|limits|unlimit``: per-tenant limits from the command line."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.engine import URL, Engine

from dms import jobs
from dms.cli import main


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def test_limit_list_replace_and_unlimit(
    database_url: URL, engine: Engine, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    base = ["--database-url", url, "jobs"]
    capsys.readouterr()
    assert main([*base, "limit", tenant, "--max-running", "4", "--per-second", "0.5"]) == 0
    assert main([*base, "limit", tenant, "--kind", "ocr.page", "--max-running", "1"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert main([*base, "limits", "--tenant", tenant, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["limits"]
    assert main([*base, "limits", "--tenant", tenant]) == 0
    table = capsys.readouterr().out.splitlines()
    assert main([*base, "unlimit", tenant, "--kind", "ocr.page"]) == 0
    assert main([*base, "unlimit", tenant, "--kind", "ocr.page"]) == 1
    again = capsys.readouterr().err

    assert said == [
        f"limited {tenant} (every kind): at most 4 running, at most 0.5 started a second",
        f"limited {tenant} (kind ocr.page): at most 1 running",
    ]
    assert listed == [
        {
            "limit": {"tenant": tenant, "kind": None, "max_running": 4, "per_second": 0.5},
            "running": 0,
        },
        {
            "limit": {"tenant": tenant, "kind": "ocr.page", "max_running": 1, "per_second": None},
            "running": 0,
        },
    ]
    assert table == [
        f"{tenant}\tevery kind\tat most 4 running, at most 0.5 started a second\trunning 0",
        f"{tenant}\tkind ocr.page\tat most 1 running\trunning 0",
        "2 limit(s)",
    ]
    assert "no limit on kind 'ocr.page'" in again
    with engine.connect() as conn:
        assert [s.limit.kind for s in jobs.list_limits(conn, tenant=tenant)] == [None]


@pytest.mark.parametrize(
    "refused",
    [
        ([], "needs max_running, per_second or both"),
        (["--max-running", "-1"], "max_running must be"),
        (["--per-second", "0"], "per_second must be"),
        (["--per-second", "nan"], "per_second must be"),
    ],
)
def test_limit_refuses_what_it_cannot_hold_and_changes_nothing(
    database_url: URL,
    engine: Engine,
    tenant: str,
    capsys: pytest.CaptureFixture[str],
    refused: tuple[list[str], str],
) -> None:
    arguments, message = refused
    url = _url(database_url)
    assert main(["--database-url", url, "jobs", "limit", tenant, *arguments]) == 1
    assert message in capsys.readouterr().err
    with engine.connect() as conn:
        assert jobs.list_limits(conn, tenant=tenant) == []


def test_limit_of_an_unknown_tenant_is_refused(
    database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    assert main(["--database-url", url, "jobs", "limit", "nosuchtenant", "--max-running", "1"]) == 1
    assert "nosuchtenant" in capsys.readouterr().err
