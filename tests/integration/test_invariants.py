"""The database itself refuses every violation of the domain invariants (docs/architecture.md).

Each violation is written with plain Core on a tenant-routed connection, as any code path could,
inside a savepoint; the test checks the driver's error class, the constraint it names, and that
the tables are exactly as before. The same tests run on a Citus cluster, where the coordinator
does not pass on a worker's constraint names: :mod:`dms.testing.violations` tells the rule
there (the trigger-enforced rules by their own SQLSTATE).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from dms import citus, tenancy
from dms.config import Settings
from dms.domain import FieldType
from dms.schema import tenant as t
from dms.schema.tenant import MAX_FOLDER_DEPTH
from dms.testing.blocking import is_blocked_by
from dms.testing.factories import (
    DocumentFactory,
    DocumentTagFactory,
    FolderFactory,
    MetadataFieldFactory,
    MetadataOptionFactory,
    MetadataValueFactory,
    RevisionFactory,
    TagFactory,
)
from dms.testing.violations import violated_column, violated_rule
from dms.users import create_user, users_stand_in

Row = Any
CheckViolation = psycopg.errors.CheckViolation
UniqueViolation = psycopg.errors.UniqueViolation
NotNullViolation = psycopg.errors.NotNullViolation
ForeignKeyViolation = psycopg.errors.ForeignKeyViolation
RestrictViolation = psycopg.errors.RestrictViolation
#: How the trigger-enforced rules refuse: their own SQLSTATEs in the integrity class.
GuardViolation = psycopg.errors.IntegrityError


def _rows(conn: Connection, table: sa.Table) -> list[Row]:
    primary_key = list(table.primary_key.columns)
    return list(conn.execute(sa.select(table).order_by(*primary_key)).all())


def assert_refused(
    conn: Connection,
    statement: sa.Executable,
    error: type[psycopg.Error],
    constraint: str | None,
    *,
    tables: Sequence[sa.Table],
) -> psycopg.Error:
    """Run ``statement`` in a savepoint; it must fail with ``error`` and change no row."""
    before = [_rows(conn, table) for table in tables]

    with pytest.raises(IntegrityError) as excinfo, conn.begin_nested():
        conn.execute(statement)

    orig = excinfo.value.orig
    assert isinstance(orig, psycopg.Error)
    assert type(orig) is error
    assert violated_rule(orig) == constraint
    assert [_rows(conn, table) for table in tables] == before
    return orig


@pytest.fixture
def document(tenant_conn: Connection, user_id: uuid.UUID) -> Row:
    return DocumentFactory(conn=tenant_conn, created_by=user_id)


def _revision_values(document_id: uuid.UUID, user_id: uuid.UUID, **overrides: Any) -> Any:
    key = f"blobs/{uuid.uuid4()}"
    values = {
        "document_id": document_id,
        "storage_key": key,
        "sha256": "a" * 64,
        "size_bytes": 10,
        "mime_type": "application/pdf",
        "uploaded_by": user_id,
    }
    return values | overrides


def _revision_numbers(conn: Connection, document_id: uuid.UUID) -> list[int]:
    query = (
        sa.select(t.file_revisions.c.revision_no)
        .where(t.file_revisions.c.document_id == document_id)
        .order_by(t.file_revisions.c.revision_no)
    )
    return list(conn.scalars(query))


def _disable_revision_guard(conn: Connection, slug: str) -> None:
    """Switch the trigger off (until rollback) to reach the constraints behind it."""
    schema = tenancy.schema_name(slug)
    citus.allow_tenant_triggers(conn)  # on Citus, trigger DDL on a tenant table needs it
    conn.exec_driver_sql(
        f'ALTER TABLE "{schema}".file_revisions DISABLE TRIGGER file_revisions_guard'
    )


# --- file revisions -----------------------------------------------------------------------


def test_revisions_are_numbered_one_two_three_when_revision_no_is_omitted(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    numbers = [
        RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)[
            "revision_no"
        ]
        for _ in range(3)
    ]

    assert numbers == [1, 2, 3]
    assert _revision_numbers(tenant_conn, document["id"]) == [1, 2, 3]


def test_revisions_are_numbered_per_document(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    other = DocumentFactory(conn=tenant_conn, created_by=user_id)
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)

    first_of_other = RevisionFactory(conn=tenant_conn, document_id=other["id"], uploaded_by=user_id)

    assert first_of_other["revision_no"] == 1


def test_explicit_next_revision_number_is_accepted(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)

    RevisionFactory(
        conn=tenant_conn, document_id=document["id"], uploaded_by=user_id, revision_no=2
    )

    assert _revision_numbers(tenant_conn, document["id"]) == [1, 2]


@pytest.mark.parametrize("revision_no", [0, -1])
def test_revision_number_below_one_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row, revision_no: int
) -> None:
    values = _revision_values(document["id"], user_id, revision_no=revision_no)

    assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        GuardViolation,
        "file_revisions_gap_free",
        tables=[t.file_revisions],
    )


def test_revision_number_check_backs_up_the_trigger(
    tenant_conn: Connection, tenant: str, user_id: uuid.UUID, document: Row
) -> None:
    _disable_revision_guard(tenant_conn, tenant)
    values = _revision_values(document["id"], user_id, revision_no=0)

    assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        CheckViolation,
        "ck_file_revisions_revision_no_positive",
        tables=[t.file_revisions],
    )


def test_revision_number_gap_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    values = _revision_values(document["id"], user_id, revision_no=3)

    assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        GuardViolation,
        "file_revisions_gap_free",
        tables=[t.file_revisions],
    )


def test_duplicate_revision_number_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    values = _revision_values(document["id"], user_id, revision_no=1)

    assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        GuardViolation,
        "file_revisions_gap_free",
        tables=[t.file_revisions],
    )


def test_duplicate_revision_number_unique_key_backs_up_the_trigger(
    tenant_conn: Connection, tenant: str, user_id: uuid.UUID, document: Row
) -> None:
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    _disable_revision_guard(tenant_conn, tenant)
    values = _revision_values(document["id"], user_id, revision_no=1)

    assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        UniqueViolation,
        "uq_file_revisions_document_id_revision_no",
        tables=[t.file_revisions],
    )


_REVISION_CHANGES: dict[str, Callable[[Row, Row], Any]] = {
    "revision_no": lambda _rev, _other: 7,
    "sha256": lambda _rev, _other: "f" * 64,
    "size_bytes": lambda rev, _other: rev["size_bytes"] + 1,
    "storage_key": lambda _rev, _other: f"blobs/{uuid.uuid4()}",
    "mime_type": lambda _rev, _other: "text/plain",
    "document_id": lambda _rev, other: other["id"],
}


@pytest.mark.parametrize("column", sorted(_REVISION_CHANGES))
def test_revision_cannot_be_updated(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row, column: str
) -> None:
    other = DocumentFactory(conn=tenant_conn, created_by=user_id)
    revision = RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    new_value = _REVISION_CHANGES[column](revision, other)

    assert_refused(
        tenant_conn,
        sa.update(t.file_revisions)
        .where(t.file_revisions.c.id == revision["id"])
        .values({column: new_value}),
        GuardViolation,
        "file_revisions_append_only",
        tables=[t.file_revisions],
    )


def _new_user(engine: Engine) -> uuid.UUID:
    # On a connection of its own: create_user re-routes the connection it is given.
    with engine.begin() as conn:
        return create_user(conn, email=f"{uuid.uuid4().hex}@example.org", display_name="B")


def test_revision_uploader_cannot_be_changed(
    engine: Engine, tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    someone_else = _new_user(engine)
    revision = RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)

    assert_refused(
        tenant_conn,
        sa.update(t.file_revisions)
        .where(t.file_revisions.c.id == revision["id"])
        .values(uploaded_by=someone_else),
        GuardViolation,
        "file_revisions_append_only",
        tables=[t.file_revisions],
    )


def test_single_revision_cannot_be_deleted(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    last = RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)

    assert_refused(
        tenant_conn,
        sa.delete(t.file_revisions).where(t.file_revisions.c.id == last["id"]),
        GuardViolation,
        "file_revisions_append_only",
        tables=[t.file_revisions, t.documents],
    )


def test_deleting_a_document_deletes_its_revisions(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    other = DocumentFactory(conn=tenant_conn, created_by=user_id)
    kept = RevisionFactory(conn=tenant_conn, document_id=other["id"], uploaded_by=user_id)
    RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    current = RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)
    tenant_conn.execute(
        sa.update(t.documents)
        .where(t.documents.c.id == document["id"])
        .values(current_revision_id=current["id"])
    )

    tenant_conn.execute(sa.delete(t.documents).where(t.documents.c.id == document["id"]))

    assert _revision_numbers(tenant_conn, document["id"]) == []
    remaining = tenant_conn.scalars(sa.select(t.file_revisions.c.id)).all()
    assert remaining == [kept["id"]]


def test_negative_size_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    values = _revision_values(document["id"], user_id, size_bytes=-1)

    assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        CheckViolation,
        "ck_file_revisions_size_not_negative",
        tables=[t.file_revisions],
    )


def test_empty_file_is_accepted(tenant_conn: Connection, user_id: uuid.UUID, document: Row) -> None:
    revision = RevisionFactory(
        conn=tenant_conn, document_id=document["id"], uploaded_by=user_id, size_bytes=0
    )

    assert revision["size_bytes"] == 0


@pytest.mark.parametrize(
    "sha256",
    [
        "A" * 64,
        "a" * 63,
        "a" * 65,
        "g" * 64,
        " " + "a" * 63,
        "",
    ],
    ids=["uppercase", "short", "long", "non-hex", "space", "empty"],
)
def test_malformed_sha256_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row, sha256: str
) -> None:
    values = _revision_values(document["id"], user_id, sha256=sha256)

    assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        CheckViolation,
        "ck_file_revisions_sha256_hex",
        tables=[t.file_revisions],
    )


def test_revisions_with_identical_bytes_may_share_a_storage_key(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    """Issue 15: one content-addressed blob serves every revision that has its bytes."""
    other = DocumentFactory(conn=tenant_conn, created_by=user_id)
    existing = RevisionFactory(conn=tenant_conn, document_id=other["id"], uploaded_by=user_id)
    values = _revision_values(
        document["id"], user_id, storage_key=existing["storage_key"], sha256=existing["sha256"]
    )

    tenant_conn.execute(sa.insert(t.file_revisions).values(**values))

    sharing = tenant_conn.scalar(
        sa.select(sa.func.count()).where(t.file_revisions.c.storage_key == existing["storage_key"])
    )
    assert sharing == 2


def test_blob_key_must_end_with_its_own_hash(tenant_conn: Connection) -> None:
    assert_refused(
        tenant_conn,
        sa.insert(t.blobs).values(
            storage_key="acme/sha256/aa/" + "a" * 64, sha256="b" * 64, size_bytes=1
        ),
        CheckViolation,
        "ck_blobs_key_is_content_address",
        tables=[t.blobs],
    )


def test_duplicate_sha256_is_allowed_and_indexed(
    tenant_conn: Connection, tenant: str, user_id: uuid.UUID, document: Row
) -> None:
    first = RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)

    second = RevisionFactory(
        conn=tenant_conn, document_id=document["id"], uploaded_by=user_id, sha256=first["sha256"]
    )

    assert second["sha256"] == first["sha256"]
    indexdef = tenant_conn.scalar(
        sa.text(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = :schema "
            "AND indexname = 'ix_file_revisions_sha256'"
        ),
        {"schema": tenancy.schema_name(tenant)},
    )
    assert indexdef is not None
    assert "UNIQUE" not in indexdef


def test_missing_mime_type_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    values = _revision_values(document["id"], user_id, mime_type=None)

    error = assert_refused(
        tenant_conn,
        sa.insert(t.file_revisions).values(**values),
        NotNullViolation,
        None,
        tables=[t.file_revisions],
    )

    assert violated_column(error) == "mime_type"


def test_current_revision_can_be_one_of_its_own(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    revision = RevisionFactory(conn=tenant_conn, document_id=document["id"], uploaded_by=user_id)

    tenant_conn.execute(
        sa.update(t.documents)
        .where(t.documents.c.id == document["id"])
        .values(current_revision_id=revision["id"])
    )

    current = tenant_conn.scalar(
        sa.select(t.documents.c.current_revision_id).where(t.documents.c.id == document["id"])
    )
    assert current == revision["id"]


def test_current_revision_of_another_document_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    other = DocumentFactory(conn=tenant_conn, created_by=user_id)
    foreign = RevisionFactory(conn=tenant_conn, document_id=other["id"], uploaded_by=user_id)

    assert_refused(
        tenant_conn,
        sa.update(t.documents)
        .where(t.documents.c.id == document["id"])
        .values(current_revision_id=foreign["id"]),
        ForeignKeyViolation,
        "fk_documents_current_revision",
        tables=[t.documents],
    )


# --- timestamps, users --------------------------------------------------------------------


def test_timestamps_are_not_null_in_every_tenant_table(
    tenant_conn: Connection, tenant: str
) -> None:
    rows = tenant_conn.execute(
        sa.text(
            "SELECT table_name, column_name, is_nullable FROM information_schema.columns "
            "WHERE table_schema = :schema AND column_name IN ('created_at', 'updated_at')"
        ),
        {"schema": tenancy.schema_name(tenant)},
    ).all()

    assert {row.table_name for row in rows} >= {
        "folders",
        "documents",
        "file_revisions",
        "tags",
        "metadata_fields",
    }
    assert [row for row in rows if row.is_nullable != "NO"] == []


def test_explicit_null_created_at_is_refused(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    error = assert_refused(
        tenant_conn,
        sa.insert(t.documents).values(title="Doc", created_by=user_id, created_at=None),
        NotNullViolation,
        None,
        tables=[t.documents],
    )

    assert violated_column(error) == "created_at"


def test_primary_keys_are_uuids(tenant_conn: Connection, tenant: str) -> None:
    rows = tenant_conn.execute(
        sa.text(
            "SELECT table_name, data_type FROM information_schema.columns "
            "WHERE table_schema = :schema AND column_name = 'id'"
        ),
        {"schema": tenancy.schema_name(tenant)},
    ).all()

    assert {row.table_name for row in rows} == {
        "folders",
        "documents",
        "file_revisions",
        "tags",
        "metadata_fields",
        "metadata_field_options",
        "import_provenance",
        "known_users",
        "audit_events",
        "access_groups",
        "access_entries",
        "access_scopes",
    }
    assert {row.data_type for row in rows} == {"uuid"}


def test_user_who_created_rows_cannot_be_deleted(engine: Engine, tenant_conn: Connection) -> None:
    author = _new_user(engine)
    FolderFactory(conn=tenant_conn, created_by=author)
    users = users_stand_in(Settings.from_env().users_schema)
    # PostgreSQL 18 reports ON DELETE RESTRICT with its own SQLSTATE (23001); older, 23503.
    server = tenant_conn.dialect.server_version_info or (0,)
    expected = RestrictViolation if server >= (18,) else ForeignKeyViolation

    assert_refused(
        tenant_conn,
        sa.delete(users).where(users.c.id == author),
        expected,
        # The deletion cascades to known_users, where the folder's key refuses it.
        "fk_folders_created_by_known_users",
        tables=[users, t.known_users, t.folders],
    )


def test_user_whose_rows_are_gone_can_be_deleted(engine: Engine, tenant_conn: Connection) -> None:
    """Control: known_users keeps no user alive by itself; it follows the deletion."""
    author = _new_user(engine)
    folder = FolderFactory(conn=tenant_conn, created_by=author)
    tenant_conn.execute(sa.delete(t.folders).where(t.folders.c.id == folder["id"]))
    users = users_stand_in(Settings.from_env().users_schema)
    known = sa.select(sa.func.count()).where(t.known_users.c.id == author)
    assert tenant_conn.scalar(known) == 1

    tenant_conn.execute(sa.delete(users).where(users.c.id == author))

    assert tenant_conn.scalar(known) == 0
    assert tenant_conn.scalar(sa.select(sa.func.count()).where(users.c.id == author)) == 0


# --- documents ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, -1])
def test_document_version_below_one_is_refused(
    tenant_conn: Connection, document: Row, version: int
) -> None:
    assert_refused(
        tenant_conn,
        sa.update(t.documents).where(t.documents.c.id == document["id"]).values(version=version),
        CheckViolation,
        "ck_documents_version_positive",
        tables=[t.documents],
    )


def test_new_document_with_version_zero_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    assert_refused(
        tenant_conn,
        sa.insert(t.documents).values(title="Doc", created_by=user_id, version=0),
        CheckViolation,
        "ck_documents_version_positive",
        tables=[t.documents],
    )


def test_document_title_differing_only_in_case_is_refused_in_one_folder(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    folder = FolderFactory(conn=tenant_conn, created_by=user_id)
    DocumentFactory(conn=tenant_conn, created_by=user_id, folder_id=folder["id"], title="Plan")

    assert_refused(
        tenant_conn,
        sa.insert(t.documents).values(title="PLAN", folder_id=folder["id"], created_by=user_id),
        UniqueViolation,
        "uq_documents_folder_title",
        tables=[t.documents],
    )


def test_soft_deleted_document_frees_its_title_and_blocks_its_restore(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    folder = FolderFactory(conn=tenant_conn, created_by=user_id)
    old = DocumentFactory(
        conn=tenant_conn, created_by=user_id, folder_id=folder["id"], title="Report"
    )
    tenant_conn.execute(
        sa.update(t.documents).where(t.documents.c.id == old["id"]).values(deleted_at=sa.func.now())
    )

    DocumentFactory(conn=tenant_conn, created_by=user_id, folder_id=folder["id"], title="report")

    assert_refused(
        tenant_conn,
        sa.update(t.documents).where(t.documents.c.id == old["id"]).values(deleted_at=None),
        UniqueViolation,
        "uq_documents_folder_title",
        tables=[t.documents],
    )


# --- folders ------------------------------------------------------------------------------


def _folder(conn: Connection, user_id: uuid.UUID, name: str, parent: Row | None = None) -> Row:
    parent_id = None if parent is None else parent["id"]
    return FolderFactory(conn=conn, created_by=user_id, name=name, parent_id=parent_id)


def _move(folder: Row, parent: Row | None) -> sa.Update:
    parent_id = None if parent is None else parent["id"]
    return sa.update(t.folders).where(t.folders.c.id == folder["id"]).values(parent_id=parent_id)


def test_top_level_folder_name_differing_only_in_case_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    _folder(tenant_conn, user_id, "Reports")

    assert_refused(
        tenant_conn,
        sa.insert(t.folders).values(name="REPORTS", created_by=user_id),
        UniqueViolation,
        "uq_folders_sibling_name",
        tables=[t.folders],
    )


def test_nested_folder_name_differing_only_in_case_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    parent = _folder(tenant_conn, user_id, "Parent")
    _folder(tenant_conn, user_id, "Q1", parent)

    assert_refused(
        tenant_conn,
        sa.insert(t.folders).values(name="q1", parent_id=parent["id"], created_by=user_id),
        UniqueViolation,
        "uq_folders_sibling_name",
        tables=[t.folders],
    )


def test_moving_a_folder_next_to_a_namesake_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    parent = _folder(tenant_conn, user_id, "Parent")
    _folder(tenant_conn, user_id, "Drafts", parent)
    top = _folder(tenant_conn, user_id, "drafts")

    assert_refused(
        tenant_conn,
        _move(top, parent),
        UniqueViolation,
        "uq_folders_sibling_name",
        tables=[t.folders],
    )


def test_same_folder_name_is_allowed_under_different_parents(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    first = _folder(tenant_conn, user_id, "First")
    second = _folder(tenant_conn, user_id, "Second")

    _folder(tenant_conn, user_id, "Archive", first)
    _folder(tenant_conn, user_id, "archive", second)
    _folder(tenant_conn, user_id, "ARCHIVE")

    names = tenant_conn.scalars(
        sa.select(t.folders.c.name).where(sa.func.lower(t.folders.c.name) == "archive")
    ).all()
    assert sorted(names) == ["ARCHIVE", "Archive", "archive"]


def test_soft_deleted_folder_frees_its_name_and_blocks_its_restore(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    old = _folder(tenant_conn, user_id, "Inbox")
    tenant_conn.execute(
        sa.update(t.folders).where(t.folders.c.id == old["id"]).values(deleted_at=sa.func.now())
    )

    _folder(tenant_conn, user_id, "inbox")

    assert_refused(
        tenant_conn,
        sa.update(t.folders).where(t.folders.c.id == old["id"]).values(deleted_at=None),
        UniqueViolation,
        "uq_folders_sibling_name",
        tables=[t.folders],
    )


def test_moving_a_folder_under_its_descendant_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    a = _folder(tenant_conn, user_id, "A")
    b = _folder(tenant_conn, user_id, "B", a)
    c = _folder(tenant_conn, user_id, "C", b)

    assert_refused(tenant_conn, _move(a, c), GuardViolation, "folders_no_cycle", tables=[t.folders])


def test_moving_a_folder_under_its_child_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    a = _folder(tenant_conn, user_id, "A")
    b = _folder(tenant_conn, user_id, "B", a)

    assert_refused(tenant_conn, _move(a, b), GuardViolation, "folders_no_cycle", tables=[t.folders])


def test_folder_cannot_become_its_own_parent(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    a = _folder(tenant_conn, user_id, "A")

    assert_refused(tenant_conn, _move(a, a), GuardViolation, "folders_no_cycle", tables=[t.folders])


def test_new_folder_cannot_be_its_own_parent(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    folder_id = uuid.uuid4()

    assert_refused(
        tenant_conn,
        sa.insert(t.folders).values(
            id=folder_id, parent_id=folder_id, name="Loop", created_by=user_id
        ),
        CheckViolation,
        "ck_folders_not_own_parent",
        tables=[t.folders],
    )


def _chain(conn: Connection, user_id: uuid.UUID, levels: int, prefix: str) -> list[Row]:
    chain: list[Row] = []
    for level in range(1, levels + 1):
        chain.append(_folder(conn, user_id, f"{prefix}{level}", chain[-1] if chain else None))
    return chain


def test_folder_chain_of_max_depth_is_accepted(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    chain = _chain(tenant_conn, user_id, MAX_FOLDER_DEPTH, "L")

    assert len(chain) == MAX_FOLDER_DEPTH
    assert chain[-1]["parent_id"] == chain[-2]["id"]


def test_folder_below_max_depth_is_refused(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    chain = _chain(tenant_conn, user_id, MAX_FOLDER_DEPTH, "L")

    assert_refused(
        tenant_conn,
        sa.insert(t.folders).values(name="Too deep", parent_id=chain[-1]["id"], created_by=user_id),
        GuardViolation,
        "folders_max_depth",
        tables=[t.folders],
    )


def test_moving_a_subtree_beyond_max_depth_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    chain = _chain(tenant_conn, user_id, MAX_FOLDER_DEPTH - 2, "L")
    subtree = _chain(tenant_conn, user_id, 3, "S")  # three levels: 30 + 3 > 32

    assert_refused(
        tenant_conn,
        _move(subtree[0], chain[-1]),
        GuardViolation,
        "folders_max_depth",
        tables=[t.folders],
    )


def test_moving_a_subtree_to_exactly_max_depth_is_accepted(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    chain = _chain(tenant_conn, user_id, MAX_FOLDER_DEPTH - 2, "L")
    subtree = _chain(tenant_conn, user_id, 2, "S")  # two levels: 30 + 2 = 32

    tenant_conn.execute(_move(subtree[0], chain[-1]))

    parent = tenant_conn.scalar(
        sa.select(t.folders.c.parent_id).where(t.folders.c.id == subtree[0]["id"])
    )
    assert parent == chain[-1]["id"]


# --- tags ---------------------------------------------------------------------------------


def test_tag_differing_only_in_case_is_refused(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    TagFactory(conn=tenant_conn, created_by=user_id, name="Urgent")

    assert_refused(
        tenant_conn,
        sa.insert(t.tags).values(name="uRGENT", created_by=user_id),
        UniqueViolation,
        "uq_tags_name",
        tables=[t.tags],
    )


def test_duplicate_document_tag_link_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row
) -> None:
    tag = TagFactory(conn=tenant_conn, created_by=user_id)
    DocumentTagFactory(conn=tenant_conn, document_id=document["id"], tag_id=tag["id"])

    assert_refused(
        tenant_conn,
        sa.insert(t.document_tags).values(document_id=document["id"], tag_id=tag["id"]),
        UniqueViolation,
        "pk_document_tags",
        tables=[t.document_tags],
    )


# --- metadata -----------------------------------------------------------------------------


def test_metadata_field_name_differing_only_in_case_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    MetadataFieldFactory(conn=tenant_conn, created_by=user_id, name="Invoice number")

    assert_refused(
        tenant_conn,
        sa.insert(t.metadata_fields).values(
            name="INVOICE NUMBER", field_type="int", created_by=user_id
        ),
        UniqueViolation,
        "uq_metadata_fields_name",
        tables=[t.metadata_fields],
    )


def test_unknown_field_type_is_refused(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    assert_refused(
        tenant_conn,
        sa.insert(t.metadata_fields).values(name="Colour", field_type="color", created_by=user_id),
        CheckViolation,
        "ck_metadata_fields_field_type_known",
        tables=[t.metadata_fields],
    )


_SAMPLE_VALUES: dict[str, Any] = {
    "value_string": "ACME Ltd",
    "value_text": "A longer text",
    "value_int": 42,
    "value_decimal": Decimal("12.50"),
    "value_date": date(2024, 2, 29),
    "value_bool": False,
    "value_url": "https://example.org/a?b=c",
}


@dataclass
class Fields:
    """One field of every type (and an option for each select field) in one tenant."""

    by_type: dict[str, Row] = field(default_factory=dict)
    option_of: dict[str, Row] = field(default_factory=dict)

    def value(self, field_type: str, column: str) -> Any:
        """A valid value for ``column``; an option of ``field_type``'s field for ``option_id``."""
        if column == "option_id":
            owner = field_type if field_type in self.option_of else "select"
            return self.option_of[owner]["id"]
        return _SAMPLE_VALUES[column]


@pytest.fixture
def fields(tenant_conn: Connection, user_id: uuid.UUID) -> Fields:
    result = Fields()
    for field_type in (kind.value for kind in FieldType):
        result.by_type[field_type] = MetadataFieldFactory(
            conn=tenant_conn, created_by=user_id, field_type=field_type
        )
    for field_type in ("select", "multi_select"):
        result.option_of[field_type] = MetadataOptionFactory(
            conn=tenant_conn, field_id=result.by_type[field_type]["id"], field_type=field_type
        )
    return result


def _value_insert(document: Row, field_row: Row, **columns: Any) -> sa.Insert:
    return sa.insert(t.document_metadata).values(
        document_id=document["id"],
        field_id=field_row["id"],
        field_type=field_row["field_type"],
        **columns,
    )


@pytest.mark.parametrize("field_type", sorted(t.VALUE_COLUMNS))
def test_value_in_the_column_of_its_type_is_accepted(
    tenant_conn: Connection, document: Row, fields: Fields, field_type: str
) -> None:
    column = t.VALUE_COLUMNS[field_type]
    value = fields.value(field_type, column)

    tenant_conn.execute(_value_insert(document, fields.by_type[field_type], **{column: value}))

    stored = tenant_conn.scalar(
        sa.select(t.document_metadata.c[column]).where(
            t.document_metadata.c.field_id == fields.by_type[field_type]["id"]
        )
    )
    assert stored == value


def test_multi_select_value_with_choices_is_accepted(
    tenant_conn: Connection, document: Row, fields: Fields
) -> None:
    multi = fields.by_type["multi_select"]
    tenant_conn.execute(_value_insert(document, multi))

    tenant_conn.execute(
        sa.insert(t.document_metadata_choices).values(
            document_id=document["id"],
            field_id=multi["id"],
            option_id=fields.option_of["multi_select"]["id"],
        )
    )

    choices = tenant_conn.scalars(sa.select(t.document_metadata_choices.c.option_id)).all()
    assert choices == [fields.option_of["multi_select"]["id"]]


def _wrong_column(field_type: str) -> str:
    return "value_text" if field_type == "string" else "value_string"


@pytest.mark.parametrize("field_type", sorted(t.VALUE_COLUMNS))
def test_value_in_the_wrong_column_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields, field_type: str
) -> None:
    wrong = _wrong_column(field_type)

    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type[field_type], **{wrong: _SAMPLE_VALUES[wrong]}),
        CheckViolation,
        "ck_document_metadata_value_matches_type",
        tables=[t.document_metadata],
    )


@pytest.mark.parametrize("field_type", sorted(t.VALUE_COLUMNS))
def test_value_in_two_columns_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields, field_type: str
) -> None:
    right = t.VALUE_COLUMNS[field_type]
    wrong = _wrong_column(field_type)
    columns = {right: fields.value(field_type, right), wrong: _SAMPLE_VALUES[wrong]}

    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type[field_type], **columns),
        CheckViolation,
        "ck_document_metadata_value_matches_type",
        tables=[t.document_metadata],
    )


@pytest.mark.parametrize("field_type", sorted(t.VALUE_COLUMNS))
def test_value_in_no_column_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields, field_type: str
) -> None:
    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type[field_type]),
        CheckViolation,
        "ck_document_metadata_value_matches_type",
        tables=[t.document_metadata],
    )


def test_multi_select_value_with_a_value_column_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields
) -> None:
    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type["multi_select"], value_string="red"),
        CheckViolation,
        "ck_document_metadata_value_matches_type",
        tables=[t.document_metadata],
    )


def test_multi_select_value_with_an_option_column_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields
) -> None:
    option = fields.option_of["multi_select"]

    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type["multi_select"], option_id=option["id"]),
        CheckViolation,
        "ck_document_metadata_value_matches_type",
        tables=[t.document_metadata],
    )


_WITHOUT_OPTIONS = sorted(kind.value for kind in FieldType if not kind.has_options)


@pytest.mark.parametrize("field_type", _WITHOUT_OPTIONS)
def test_options_of_a_field_without_options_are_refused(
    tenant_conn: Connection, fields: Fields, field_type: str
) -> None:
    assert_refused(
        tenant_conn,
        sa.insert(t.metadata_field_options).values(
            field_id=fields.by_type[field_type]["id"], field_type=field_type, value="Nope"
        ),
        CheckViolation,
        "ck_metadata_field_options_field_has_options",
        tables=[t.metadata_field_options],
    )


def test_option_claiming_a_select_type_for_a_plain_field_is_refused(
    tenant_conn: Connection, fields: Fields
) -> None:
    assert_refused(
        tenant_conn,
        sa.insert(t.metadata_field_options).values(
            field_id=fields.by_type["string"]["id"], field_type="select", value="Nope"
        ),
        ForeignKeyViolation,
        "fk_metadata_field_options_field",
        tables=[t.metadata_field_options],
    )


def test_option_of_another_field_as_select_value_is_refused(
    tenant_conn: Connection, user_id: uuid.UUID, document: Row, fields: Fields
) -> None:
    other = MetadataFieldFactory(conn=tenant_conn, created_by=user_id, field_type="select")
    foreign = MetadataOptionFactory(conn=tenant_conn, field_id=other["id"], field_type="select")

    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type["select"], option_id=foreign["id"]),
        ForeignKeyViolation,
        "fk_document_metadata_option",
        tables=[t.document_metadata],
    )


def test_option_of_another_field_as_multi_select_choice_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields
) -> None:
    multi = fields.by_type["multi_select"]
    tenant_conn.execute(_value_insert(document, multi))

    assert_refused(
        tenant_conn,
        sa.insert(t.document_metadata_choices).values(
            document_id=document["id"],
            field_id=multi["id"],
            option_id=fields.option_of["select"]["id"],
        ),
        ForeignKeyViolation,
        "fk_document_metadata_choices_option",
        tables=[t.document_metadata_choices],
    )


def test_choices_of_a_single_select_value_are_refused(
    tenant_conn: Connection, document: Row, fields: Fields
) -> None:
    select = fields.by_type["select"]
    option = fields.option_of["select"]
    tenant_conn.execute(_value_insert(document, select, option_id=option["id"]))

    assert_refused(
        tenant_conn,
        sa.insert(t.document_metadata_choices).values(
            document_id=document["id"],
            field_id=select["id"],
            option_id=option["id"],
            field_type="select",
        ),
        CheckViolation,
        "ck_document_metadata_choices_multi_select_only",
        tables=[t.document_metadata_choices],
    )


def test_value_claiming_another_type_than_its_field_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields
) -> None:
    string_field = fields.by_type["string"]

    assert_refused(
        tenant_conn,
        sa.insert(t.document_metadata).values(
            document_id=document["id"], field_id=string_field["id"], field_type="int", value_int=1
        ),
        ForeignKeyViolation,
        "fk_document_metadata_field",
        tables=[t.document_metadata],
    )


@pytest.mark.parametrize(
    "url",
    ["ftp://example.org/file", "example.org", "http://", "https://exa mple.org", "javascript:x"],
)
def test_invalid_url_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields, url: str
) -> None:
    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type["url"], value_url=url),
        CheckViolation,
        "ck_document_metadata_url_valid",
        tables=[t.document_metadata],
    )


def test_second_value_for_the_same_field_is_refused(
    tenant_conn: Connection, document: Row, fields: Fields
) -> None:
    MetadataValueFactory(
        conn=tenant_conn,
        document_id=document["id"],
        field_id=fields.by_type["int"]["id"],
        field_type="int",
        value_int=1,
    )

    assert_refused(
        tenant_conn,
        _value_insert(document, fields.by_type["int"], value_int=2),
        UniqueViolation,
        "pk_document_metadata",
        tables=[t.document_metadata],
    )


# --- concurrency --------------------------------------------------------------------------


@dataclass
class Attempt:
    """One transaction on its own connection and thread, held open until released."""

    pid: int | None = None
    executed: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class Race:
    """What the racing transactions share: where they run and when they may commit."""

    engine: Engine
    slug: str
    barrier: threading.Barrier
    may_commit: threading.Event


def _run_attempt(race: Race, statement: sa.Executable, attempt: Attempt) -> None:
    try:
        with race.engine.connect() as raw:
            transaction = raw.begin()
            conn = tenancy.route(raw, race.slug)
            attempt.pid = conn.scalar(sa.select(sa.func.pg_backend_pid()))
            conn.execute(sa.select(sa.func.set_config("lock_timeout", "20s", True)))
            race.barrier.wait(timeout=TIMEOUT_SECONDS)
            attempt.result = conn.execute(statement).all()
            attempt.executed.set()
            if race.may_commit.wait(timeout=TIMEOUT_SECONDS):
                transaction.commit()
            else:
                attempt.error = TimeoutError("the test never released the transaction")
    except Exception as exc:  # the test inspects whatever the transaction raised
        attempt.error = exc
    finally:
        attempt.finished.set()


def _blocked_by(monitor: Connection, waiter: Attempt, holder: Attempt) -> bool:
    assert waiter.pid is not None
    assert holder.pid is not None
    return is_blocked_by(monitor, waiter.pid, holder.pid)


def _first_and_second(attempts: Sequence[Attempt]) -> tuple[Attempt, Attempt] | None:
    done = [a for a in attempts if a.executed.is_set() or a.finished.is_set()]
    if len(done) != 1:
        return None
    first = done[0]
    return first, next(a for a in attempts if a is not first)


def run_concurrently(
    engine: Engine, slug: str, statements: Sequence[sa.Executable]
) -> tuple[list[Attempt], bool]:
    """Run two statements in two transactions at once; commit both once one waits on the other.

    Returns the attempts and whether the second was seen blocked by the first: if the database
    did not serialise them, both execute without waiting and both commit.
    """
    attempts = [Attempt() for _ in statements]
    may_commit = threading.Event()
    race = Race(
        engine=engine,
        slug=slug,
        barrier=threading.Barrier(len(statements)),
        may_commit=may_commit,
    )
    threads = [
        threading.Thread(target=_run_attempt, args=(race, statement, attempt))
        for statement, attempt in zip(statements, attempts, strict=True)
    ]
    for thread in threads:
        thread.start()
    serialised = False
    deadline = time.monotonic() + TIMEOUT_SECONDS
    try:
        with engine.connect() as monitor:
            while time.monotonic() < deadline and not all(a.finished.is_set() for a in attempts):
                if all(a.executed.is_set() or a.finished.is_set() for a in attempts):
                    break  # neither is waiting for the other
                pair = _first_and_second(attempts)
                if pair is not None and _blocked_by(monitor, pair[1], pair[0]):
                    serialised = True
                    break
                time.sleep(0.005)  # polling interval, not an assertion
    finally:
        may_commit.set()
        for thread in threads:
            thread.join(timeout=TIMEOUT_SECONDS)
    assert not any(thread.is_alive() for thread in threads)
    return attempts, serialised


def _parents(engine: Engine, slug: str) -> dict[uuid.UUID, uuid.UUID | None]:
    with engine.connect() as raw:
        conn = tenancy.route(raw, slug)
        rows = conn.execute(sa.select(t.folders.c.id, t.folders.c.parent_id))
        return {folder_id: parent_id for folder_id, parent_id in rows}


def _has_cycle(parents: dict[uuid.UUID, uuid.UUID | None]) -> bool:
    for start, parent in parents.items():
        seen = {start}
        current = parent
        while current is not None:
            if current in seen:
                return True
            seen.add(current)
            current = parents[current]
    return False


def test_concurrent_crossed_folder_moves_cannot_form_a_cycle(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with engine.begin() as raw:
        conn = tenancy.route(raw, tenant)
        a = _folder(conn, user_id, "A")
        b = _folder(conn, user_id, "B")

    attempts, serialised = run_concurrently(
        engine,
        tenant,
        [_move(a, b).returning(t.folders.c.id), _move(b, a).returning(t.folders.c.id)],
    )

    failed = [attempt.error for attempt in attempts if attempt.error is not None]
    assert len(failed) == 1
    error = failed[0]
    assert isinstance(error, IntegrityError)
    orig = error.orig
    assert type(orig) is GuardViolation
    assert violated_rule(orig) == "folders_no_cycle"
    parents = _parents(engine, tenant)
    assert not _has_cycle(parents)
    assert {parents[a["id"]], parents[b["id"]]} in ({b["id"], None}, {None, a["id"]})
    assert serialised


def test_concurrent_uploads_to_one_document_get_consecutive_numbers(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with engine.begin() as raw:
        conn = tenancy.route(raw, tenant)
        document = DocumentFactory(conn=conn, created_by=user_id)
    inserts = [
        sa.insert(t.file_revisions)
        .values(**_revision_values(document["id"], user_id))
        .returning(t.file_revisions.c.revision_no)
        for _ in range(2)
    ]

    attempts, serialised = run_concurrently(engine, tenant, inserts)

    assert [attempt.error for attempt in attempts] == [None, None]
    assert serialised
    assert sorted(attempt.result[0].revision_no for attempt in attempts) == [1, 2]
    with engine.connect() as raw:
        assert _revision_numbers(tenancy.route(raw, tenant), document["id"]) == [1, 2]
