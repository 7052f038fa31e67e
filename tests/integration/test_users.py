"""The users stand-in helpers, on plain and on tenant-routed connections."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection

from dms import citus
from dms.config import Settings, settings_of, with_settings
from dms.domain import NewDocument, NewFolder
from dms.domain.access import Rights
from dms.errors import NotFound, ValidationError
from dms.services import define_field
from dms.testing.factories import FolderFactory
from dms.uow import UnitOfWork
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


#: Writes that name their acting user (created_by, uploaded_by): an unknown one acts.
BY_THE_ACTOR: dict[str, Callable[[UnitOfWork], object]] = {
    "documents.add": lambda uow: uow.documents.add(title="A.txt"),
    "documents.add_many": lambda uow: uow.documents.add_many(
        [NewDocument(title="A.txt", folder_id=None)]
    ),
    "folders.add": lambda uow: uow.folders.add(name="A"),
    "folders.add_many": lambda uow: uow.folders.add_many([NewFolder(name="A", parent_id=None)]),
    "tags.add": lambda uow: uow.tags.add(name="a"),
    "define_field": lambda uow: define_field(uow, name="A", field_type="string"),
}
#: Writes that name another user (as a member, a grantee, an owner): an unknown one is named.
NAMING_A_USER: dict[str, Callable[[UnitOfWork, uuid.UUID], object]] = {
    "access.add_member": lambda uow, user: uow.access.add_member(
        uow.access.add_group("G").id, user
    ),
    "access.grant": lambda uow, user: uow.access.grant(Rights.VIEW, user_id=user),
    "access.set_owner": lambda uow, user: uow.access.set_owner(
        user, folder_id=uow.folders.add(name="F").id
    ),
}


@pytest.mark.parametrize("write", BY_THE_ACTOR.values(), ids=BY_THE_ACTOR)
def test_an_unknown_acting_user_is_not_found_by_their_id(
    engine: sa.Engine, tenant: str, write: Callable[[UnitOfWork], object]
) -> None:
    """A user id that the IAM's users table lacks is named, not the row it would write."""
    stranger = uuid.uuid4()
    with (
        UnitOfWork(engine, tenant=tenant, user_id=stranger) as uow,
        pytest.raises(NotFound, match=f"^user {stranger} does not exist"),
    ):
        write(uow)


@pytest.mark.parametrize("write", NAMING_A_USER.values(), ids=NAMING_A_USER)
def test_an_unknown_user_named_by_a_write_is_not_found_by_their_id(
    engine: sa.Engine,
    tenant: str,
    user_id: uuid.UUID,
    write: Callable[[UnitOfWork, uuid.UUID], object],
) -> None:
    stranger = uuid.uuid4()
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        with pytest.raises(NotFound, match=f"^user {stranger} does not exist"):
            write(uow, stranger)
        # The savepoint undid the write alone: the unit goes on, and nothing names them.
        assert stranger not in {entry.user_id for entry in uow.access.entries()}


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
