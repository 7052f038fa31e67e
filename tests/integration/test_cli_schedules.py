"""``dms jobs schedule|schedules|unschedule``: periodic jobs from the command line."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy.engine import URL

from dms.cli import main


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def test_schedule_list_replace_and_unschedule(
    database_url: URL, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(database_url)
    name = f"nightly-{uuid.uuid4().hex[:8]}"
    add = ["--database-url", url, "jobs", "schedule", name, "--tenant", tenant]
    capsys.readouterr()

    assert (
        main(
            [
                *add,
                "--cron",
                "30 2 * * *",
                "--kind",
                "report.make",
                "--payload",
                '{"scope": "all"}',
                "--timezone",
                "Europe/Berlin",
            ]
        )
        == 0
    )
    added = capsys.readouterr().out.splitlines()
    assert main(["--database-url", url, "jobs", "schedules", "--json"]) == 0
    (listed,) = [
        s for s in json.loads(capsys.readouterr().out)["schedules"] if s["schedule"]["name"] == name
    ]
    assert main([*add, "--cron", "0 * * * *", "--kind", "report.make", "--json"]) == 0
    replaced = json.loads(capsys.readouterr().out)
    assert main(["--database-url", url, "jobs", "schedules"]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith(name)]
    assert main(["--database-url", url, "jobs", "unschedule", name]) == 0
    removed = capsys.readouterr().out.splitlines()
    assert main(["--database-url", url, "jobs", "unschedule", name]) == 1
    again = capsys.readouterr().err.splitlines()

    assert added[0].startswith(f"schedule {name}: 30 2 * * * (Europe/Berlin), next 20")
    assert listed["schedule"]["payload"] == {"scope": "all"}
    assert listed["schedule"]["timezone"] == "Europe/Berlin"
    assert listed["next_run_at"][11:16] in {"00:30", "01:30"}  # 02:30 in Berlin, in UTC
    assert replaced["schedule"]["cron"] == "0 * * * *"
    assert replaced["schedule"]["payload"] == {}
    assert len(table) == 1
    assert "0 * * * *\tUTC\treport.make" in table[0]
    assert removed == [f"removed schedule {name}; the jobs it enqueued stay"]
    assert len(again) == 1
    assert name in again[0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--cron", "every day", "--kind", "k"], "cron must be a cron expression"),
        (["--cron", "*/10 * * * * *", "--kind", "k"], "five fields (minute hour day month"),
        (["--cron", "* * * * *", "--kind", "k", "--timezone", "Nowhere/Town"], "timezone"),
        (["--cron", "0 0 30 2 *", "--kind", "k"], "never fires"),
    ],
)
def test_a_bad_schedule_is_one_line_and_registers_nothing(
    database_url: URL,
    tenant: str,
    options: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = _url(database_url)
    name = f"bad-{uuid.uuid4().hex[:8]}"
    capsys.readouterr()
    assert (
        main(["--database-url", url, "jobs", "schedule", name, "--tenant", tenant, *options]) == 1
    )
    error = capsys.readouterr().err.splitlines()
    assert main(["--database-url", url, "jobs", "schedules", "--json"]) == 0
    names = {s["schedule"]["name"] for s in json.loads(capsys.readouterr().out)["schedules"]}
    assert len(error) == 1
    assert message in error[0]
    assert name not in names


def test_the_help_names_the_one_form_of_cron_it_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["jobs", "schedule", "--help"])
    text = " ".join(capsys.readouterr().out.split())

    assert exited.value.code == 0
    assert "five fields (minute hour day month weekday)" in text
    assert "second" not in text


def test_a_schedule_for_an_unknown_tenant_is_refused(
    database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    command = [
        "jobs",
        "schedule",
        "x",
        "--tenant",
        "nosuchtenant",
        "--cron",
        "@daily",
        "--kind",
        "k",
    ]
    assert main(["--database-url", _url(database_url), *command]) == 1
    assert "nosuchtenant" in capsys.readouterr().err
