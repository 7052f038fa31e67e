"""The users stand-in helpers, on plain and on tenant-routed connections."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection

from dms import citus
from dms.config import Settings, settings_of, with_settings
from dms.errors import ValidationError
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


BAD_USERS: dict[str, tuple[object, object]] = {
    "NUL in the e-mail": ("a\x00b@example.org", "A"),
    "lone surrogate in the e-mail": ("\ud800@example.org", "A"),
    "NUL in the name": ("n@example.org", "A\x00"),
    "lone surrogate in the name": ("s@example.org", "\udc80"),
    "int e-mail": (5, "A"),
    "None name": ("x@example.org", None),
    "bytes e-mail": (b"b@example.org", "A"),
    "blank e-mail": ("  ", "A"),
}


@pytest.fixture
def statements(engine: sa.Engine) -> Iterator[list[str]]:
    """Every statement sent to the server through ``engine`` during the test."""
    sent: list[str] = []

    def record(**event_arguments: Any) -> None:
        sent.append(event_arguments["statement"])

    event.listen(engine, "before_cursor_execute", record, named=True)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


@pytest.mark.parametrize(("email", "name"), list(BAD_USERS.values()), ids=list(BAD_USERS))
def test_create_user_refuses_bad_input_before_any_sql(
    engine: sa.Engine, statements: list[str], email: object, name: object
) -> None:
    with engine.begin() as conn:
        count = conn.scalar(sa.text("SELECT count(*) FROM public.users"))
        statements.clear()
        with pytest.raises(ValidationError):
            create_user(conn, email=email, display_name=name)  # type: ignore[arg-type]
        assert statements == []
        assert conn.scalar(sa.text("SELECT count(*) FROM public.users")) == count


def test_create_user_stores_any_storable_text_intact(engine: sa.Engine) -> None:
    email = f"{uuid.uuid4().hex}+ünïcødé\t😀@example.org"
    name = "  Zoë\u200b \U0001f600 \\ ' \" %_"
    with engine.begin() as conn:
        user = create_user(conn, email=email, display_name=name)
        stored = conn.execute(
            sa.text("SELECT email, display_name FROM public.users WHERE id = :id"), {"id": user}
        ).one()
    assert tuple(stored) == (email, name)


@pytest.mark.plain_only
def test_off_citus_there_are_no_nodes(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert citus.nodes(conn) == []


@pytest.mark.citus_only
def test_stand_in_is_a_reference_table_on_citus(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert citus.is_reference_table(conn, settings_of(engine).users_schema, "users")
