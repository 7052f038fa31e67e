"""The users stand-in helpers, on plain and on tenant-routed connections."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection

from dms.config import Settings, with_settings
from dms.testing.factories import FolderFactory
from dms.users import create_user, create_users_stand_in, users_table_exists


def test_create_user_keeps_a_tenant_connection_routed(tenant_conn: Connection) -> None:
    author = create_user(tenant_conn, email=f"{uuid.uuid4().hex}@example.org", display_name="A")
    folder = FolderFactory(conn=tenant_conn, created_by=author)
    assert folder["created_by"] == author


def test_create_user_is_idempotent_by_email(engine: sa.Engine) -> None:
    email = f"{uuid.uuid4().hex}@example.org"
    with engine.begin() as conn:
        first = create_user(conn, email=email, display_name="First")
        second = create_user(conn, email=email, display_name="Second")
    assert first == second


def test_stand_in_goes_to_the_configured_schema(empty_database_url: URL) -> None:
    engine = sa.create_engine(empty_database_url)
    settings = Settings(users_schema="iam")
    try:
        assert create_users_stand_in(engine, settings) is True
        assert create_users_stand_in(engine, settings) is False
        with engine.begin() as conn:
            assert users_table_exists(conn, settings)
            assert not users_table_exists(conn, Settings())
            user = create_user(conn, email="x@example.org", display_name="X", settings=settings)
            stored = conn.scalar(sa.text("SELECT id FROM iam.users WHERE email = 'x@example.org'"))
        assert stored == user
    finally:
        engine.dispose()


def test_helpers_use_the_settings_their_engine_carries(
    empty_database_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings are resolved once, at the engine; the environment is not read again."""
    monkeypatch.setenv("DMS_USERS_SCHEMA", "not_read")
    engine = with_settings(sa.create_engine(empty_database_url), Settings(users_schema="iam"))
    try:
        assert create_users_stand_in(engine) is True
        with engine.begin() as conn:
            assert users_table_exists(conn)
            user = create_user(conn, email="y@example.org", display_name="Y")
            stored = conn.scalar(sa.text("SELECT id FROM iam.users WHERE email = 'y@example.org'"))
            missing = conn.scalar(sa.select(sa.func.to_regnamespace("not_read")))
        assert stored == user
        assert missing is None
    finally:
        engine.dispose()
