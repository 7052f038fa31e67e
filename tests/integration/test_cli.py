"""The ``dms`` command: exit codes and messages, never a traceback for a user error."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from dms import tenancy
from dms.cli import main


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def test_demo_on_an_empty_database_needs_the_users_table(
    empty_database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--database-url", _url(empty_database_url), "demo"]) == 1
    err = capsys.readouterr().err
    assert "public.users" in err
    assert "dms users stand-in" in err
    assert "Traceback" not in err


def test_demo_after_stand_in_migrates_seeds_and_summarises(
    empty_database_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(empty_database_url)
    assert main(["--database-url", url, "users", "stand-in"]) == 0
    assert main(["--database-url", url, "demo"]) == 0
    out = capsys.readouterr().out
    assert "acme" in out
    assert "all at head" in out
    assert main(["--database-url", url, "status"]) == 0


@pytest.mark.parametrize("slug", ["Bad", "x;y", "pg_x", "", "a" * 41])
def test_tenants_create_rejects_bad_names(
    database_url: URL, slug: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--database-url", _url(database_url), "tenants", "create", slug]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "invalid tenant name" in err or "is reserved" in err


def test_tenants_create_list_drop(database_url: URL, capsys: pytest.CaptureFixture[str]) -> None:
    url = _url(database_url)
    slug = "cli_roundtrip"
    assert main(["--database-url", url, "tenants", "create", slug]) == 0
    assert main(["--database-url", url, "tenants", "create", slug]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["--database-url", url, "tenants", "list"]) == 0
    assert slug in capsys.readouterr().out
    assert main(["--database-url", url, "tenants", "drop", slug]) == 1  # no --yes
    assert main(["--database-url", url, "tenants", "drop", slug, "--yes"]) == 0
    assert main(["--database-url", url, "tenants", "drop", slug, "--yes"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_status_reports_schema_without_registration(
    database_url: URL, engine: sa.Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    slug = "cli_orphan"
    tenancy.create_tenant(engine, slug)
    with engine.begin() as conn:
        conn.execute(
            sa.delete(sa.table("tenants", sa.column("slug"), schema="dms")).where(
                sa.column("slug") == slug
            )
        )
    try:
        assert main(["--database-url", _url(database_url), "status"]) == 1
        out = capsys.readouterr().out
        assert f"{slug}\ttenant_{slug}" in out
        assert "not registered" in out
    finally:
        with engine.begin() as conn:
            conn.execute(sa.schema.DropSchema(f"tenant_{slug}", cascade=True))


def test_unreachable_database_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", "postgresql://nobody@127.0.0.1:1/none", "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot use the database")
    assert "Traceback" not in err


def test_not_a_postgresql_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", "sqlite:///x.db", "status"]) == 1
    assert "needs PostgreSQL" in capsys.readouterr().err
