"""``dms users create|list`` and ``dms folders create|list|tree``: what an import needs, by hand."""

from __future__ import annotations

import json
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms.cli import main
from dms.uow import UnitOfWork

Capture = pytest.CaptureFixture[str]


def dms(engine: Engine, *arguments: str) -> int:
    return main(["--database-url", engine.url.render_as_string(hide_password=False), *arguments])


def test_users_create_finds_by_email_and_lists(engine: Engine, capsys: Capture) -> None:
    email = f"{uuid.uuid4().hex}@example.org"

    assert dms(engine, "users", "create", email, "--name", "Ada Lovelace") == 0
    first = capsys.readouterr().out
    assert dms(engine, "users", "create", email, "--json") == 0
    again = json.loads(capsys.readouterr().out)
    assert dms(engine, "users", "list") == 0
    listed = capsys.readouterr().out.splitlines()
    assert dms(engine, "users", "list", "--json") == 0
    as_json = json.loads(capsys.readouterr().out)

    user_id = uuid.UUID(first.strip())
    assert again == {"id": str(user_id), "email": email}
    assert f"{user_id}\t{email}\tAda Lovelace" in listed
    assert listed[-1] == f"{len(listed) - 1} user(s)"
    assert {"id": str(user_id), "email": email, "display_name": "Ada Lovelace"} in as_json["users"]


def test_users_commands_without_a_users_table_say_how_to_make_one(
    empty_database_url: URL, capsys: Capture
) -> None:
    url = empty_database_url.render_as_string(hide_password=False)

    assert main(["--database-url", url, "users", "list"]) == 1
    listed = capsys.readouterr().err
    assert main(["--database-url", url, "users", "create", "a@example.org"]) == 1
    created = capsys.readouterr().err

    expected = (
        'error: table "public.users" does not exist. It belongs to the IAM service; for '
        "development create a stand-in with: dms users stand-in\n"
    )
    assert listed == created == expected
    engine = sa.create_engine(empty_database_url, poolclass=sa.NullPool)
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.to_regclass("public.users"))) is None


def test_folders_create_list_and_tree(
    engine: Engine, tenant: str, user_id: uuid.UUID, capsys: Capture
) -> None:
    made = ["folders", "create", "--tenant", tenant, "--user", str(user_id)]

    assert dms(engine, *made, "Archive/2026") == 0
    first = capsys.readouterr().out.split("\t")
    assert dms(engine, *made, "archive/2026/Q1", "--json") == 0
    second = json.loads(capsys.readouterr().out)
    assert dms(engine, *made, "Inbox") == 0
    capsys.readouterr()
    assert dms(engine, "folders", "list", "--tenant", tenant) == 0
    top = capsys.readouterr().out.splitlines()
    assert dms(engine, "folders", "list", "--tenant", tenant, "--in", "ARCHIVE") == 0
    inside = capsys.readouterr().out.splitlines()
    assert dms(engine, "folders", "tree", "--tenant", tenant) == 0
    tree = capsys.readouterr().out.splitlines()
    assert dms(engine, "folders", "tree", "--tenant", tenant, "--in", first[0], "--json") == 0
    below = json.loads(capsys.readouterr().out)

    with UnitOfWork(engine, tenant=tenant) as uow:
        archive, inbox = uow.folders.children(None)
        (year,) = uow.folders.children(archive.id)
        (quarter,) = uow.folders.children(year.id)
    assert first == [str(year.id), "Archive/2026", "(2 created)\n"]
    assert second == {"tenant": tenant, "id": str(quarter.id), "created": [str(quarter.id)]}
    assert top == [f"{archive.id}\tArchive", f"{inbox.id}\tInbox", "2 folder(s)"]
    assert inside == [f"{year.id}\t2026", "1 folder(s)"]
    assert tree == [
        f"Archive\t{archive.id}",
        f"  2026\t{year.id}",
        f"    Q1\t{quarter.id}",
        f"Inbox\t{inbox.id}",
        "4 folder(s)",
    ]
    assert below == {
        "tenant": tenant,
        "folder": str(year.id),
        "folders": [{"id": str(quarter.id), "parent_id": str(year.id), "name": "Q1"}],
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["list", "--in", "Nope/There"],
            "error: no folder 'Nope' on the path 'Nope/There' of tenant",
        ),
        (["tree", "--in", "///"], "error: '///' names no folder"),
        (["list", "--in", "00000000-0000-0000-0000-000000000000"], "error: folder 00000000-"),
    ],
)
def test_a_folder_that_is_not_there_is_one_line(
    engine: Engine, tenant: str, arguments: list[str], message: str, capsys: Capture
) -> None:
    assert dms(engine, "folders", *arguments, "--tenant", tenant) == 1
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "refusal",
    [
        ("a//b", "error: folder path 'a//b' has an empty name"),
        ("a/", "error: folder path 'a/' has an empty name"),
        ("/a", "error: folder path '/a' has an empty name"),
        ("a/../b", "error: folder name '..' must not be '.' or '..'"),
        ("./a", "error: folder name '.' must not be '.' or '..'"),
        ("a/b\x07c", "error: folder name 'b\\x07c' contains a control character"),
    ],
)
def test_a_path_with_an_empty_dot_or_control_name_is_refused_and_creates_nothing(
    engine: Engine, tenant: str, user_id: uuid.UUID, refusal: tuple[str, str], capsys: Capture
) -> None:
    """``a//b`` once became ``a/b``, silently: every name of a path must be one."""
    path, message = refusal
    made = ["folders", "create", "--tenant", tenant, "--user", str(user_id)]

    assert dms(engine, *made, path) == 1
    created = capsys.readouterr().err
    assert dms(engine, "folders", "list", "--tenant", tenant, "--in", path) == 1
    listed = capsys.readouterr().err

    assert created.startswith(message)
    assert created.count("\n") == 1
    assert listed == created
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.folders.children(None) == []


def test_folders_create_refuses_a_name_and_creates_nothing(
    engine: Engine, tenant: str, user_id: uuid.UUID, capsys: Capture
) -> None:
    made = ["folders", "create", "--tenant", tenant, "--user", str(user_id)]

    assert dms(engine, *made, "Fine/" + "x" * 300) == 1
    err = capsys.readouterr().err

    assert err.startswith("error: ")
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.folders.children(None) == []
