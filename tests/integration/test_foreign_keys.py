"""Every foreign key of a tenant schema refuses an unknown id, and has an index.

Each case inserts a row that is valid except for one reference to an id that does not exist,
with plain Core on a tenant-routed connection, and expects the driver's ForeignKeyViolation
naming exactly that constraint. The list of cases is checked against the catalog, so a new
foreign key without a negative test fails here. The columns that name a user refer to
``known_users``, which a trigger fills before the row is written: a row naming an unknown user
is refused by known_users' own key to ``users``, and each key to ``known_users`` is shown by
removing a user whom a row names.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from dms import citus, tenancy
from dms.domain.audit import ACTOR_SETTING
from dms.schema import tenant as t
from dms.schema.ddl import execute_ddl
from dms.testing.factories import (
    DocumentFactory,
    FolderFactory,
    MetadataFieldFactory,
    MetadataOptionFactory,
    MetadataValueFactory,
    RevisionFactory,
    TagFactory,
)
from dms.testing.violations import violated_rule
from dms.users import create_user

World = Mapping[str, Any]


@pytest.fixture
def world(engine: Engine, tenant_conn: Connection, user_id: uuid.UUID) -> World:
    """One valid row of every kind a foreign key can point at."""
    conn = tenant_conn
    folder = FolderFactory(conn=conn, created_by=user_id)
    document = DocumentFactory(conn=conn, created_by=user_id, folder_id=folder["id"])
    revision = RevisionFactory(conn=conn, document_id=document["id"], uploaded_by=user_id)
    tag = TagFactory(conn=conn, created_by=user_id)
    string_field = MetadataFieldFactory(conn=conn, created_by=user_id)
    select_field = MetadataFieldFactory(conn=conn, created_by=user_id, field_type="select")
    select_option = MetadataOptionFactory(
        conn=conn, field_id=select_field["id"], field_type="select"
    )
    multi_field = MetadataFieldFactory(conn=conn, created_by=user_id, field_type="multi_select")
    multi_option = MetadataOptionFactory(
        conn=conn, field_id=multi_field["id"], field_type="multi_select"
    )
    MetadataValueFactory(
        conn=conn,
        document_id=document["id"],
        field_id=multi_field["id"],
        field_type="multi_select",
    )
    group = conn.execute(
        sa.insert(t.access_groups).values(name="readers").returning(t.access_groups.c.id)
    ).scalar_one()
    return {
        "group": group,
        "user": user_id,
        "stranger": _new_user(engine),  # a user whom no row of the tenant names yet
        "folder": folder["id"],
        "document": document["id"],
        "revision": revision["id"],
        "tag": tag["id"],
        "string_field": string_field["id"],
        "select_field": select_field["id"],
        "select_option": select_option["id"],
        "multi_field": multi_field["id"],
        "multi_option": multi_option["id"],
    }


def _new_user(engine: Engine) -> uuid.UUID:
    # On a connection of its own: create_user re-routes the connection it is given.
    with engine.begin() as conn:
        return create_user(conn, email=f"{uuid.uuid4().hex}@example.org", display_name="New")


def _revision(w: World) -> dict[str, Any]:
    key = f"blobs/{uuid.uuid4()}"
    return {
        "document_id": w["document"],
        "storage_key": key,
        "sha256": "0" * 64,
        "size_bytes": 1,
        "mime_type": "application/pdf",
        "uploaded_by": w["user"],
    }


def _provenance(w: World, **entry: Any) -> dict[str, Any]:
    # A fresh source name each time: (parent, source name) is unique.
    defaults = {"folder_id": None, "document_id": None, "sha256": None, "parent_id": None}
    if entry.get("folder_id") is None and entry.get("document_id") is None:
        entry["folder_id"] = w["folder"]
    return {
        **defaults,
        "source_name": uuid.uuid4().bytes,
        "source_path": b"/srv/share",
        "imported_by": w["user"],
        **entry,
    }


@dataclass(frozen=True)
class FkCase:
    """A valid row of ``table`` (``row``) and the columns that ``constraint`` guards."""

    constraint: str
    table: sa.Table
    row: Callable[[World], dict[str, Any]]
    broken: tuple[str, ...] = field(default=())
    #: What refuses the broken row when ``constraint`` cannot be reached by an insert: a row
    #: naming an unknown user first enlists them in known_users (trigger), which refuses.
    refused_by: str = ""
    #: A table only the database's triggers write (access_rules refuses a direct statement):
    #: the case disables that trigger in its (rolled back) transaction to reach the key.
    derived: bool = False
    #: A table only the database's triggers or a system principal write (the search rows): the
    #: case acts as a system principal in its (rolled back) transaction to reach the key.
    as_system: bool = False
    #: What a user's removal does to a row that names them (the key's ON DELETE): ``refused``,
    #: or ``gone`` (the row goes, CASCADE) or ``unset`` (the column is cleared, SET NULL).
    when_user_goes: str = "refused"


#: known_users' key to the IAM's users: what refuses a row that names an unknown user.
UNKNOWN_USER = "fk_known_users_id_users"
NIL = uuid.UUID(t.NIL_ID)


def _entry(**entry: Any) -> Callable[[World], dict[str, Any]]:
    """An access entry (migration 0016) of the world's objects and principals, by their names."""
    return lambda w: {"rights": 1, **{column: w[name] for column, name in entry.items()}}


FK_CASES = [
    FkCase(UNKNOWN_USER, t.known_users, lambda w: {"id": w["stranger"]}, ("id",)),
    FkCase(
        "fk_folders_created_by_known_users",
        t.folders,
        lambda w: {"name": "New", "created_by": w["user"]},
        ("created_by",),
        refused_by=UNKNOWN_USER,
    ),
    FkCase(
        "fk_folders_parent_id_folders",
        t.folders,
        lambda w: {"name": "New", "parent_id": w["folder"], "created_by": w["user"]},
        ("parent_id",),
    ),
    FkCase(
        "fk_documents_created_by_known_users",
        t.documents,
        lambda w: {"title": "New", "created_by": w["user"]},
        ("created_by",),
        refused_by=UNKNOWN_USER,
    ),
    FkCase(
        "fk_documents_folder_id_folders",
        t.documents,
        lambda w: {"title": "New", "folder_id": w["folder"], "created_by": w["user"]},
        ("folder_id",),
    ),
    FkCase(
        "fk_documents_current_revision",
        t.documents,
        lambda w: {"title": "New", "current_revision_id": None, "created_by": w["user"]},
        ("current_revision_id",),
    ),
    FkCase(
        "fk_file_revisions_document_id_documents",
        t.file_revisions,
        _revision,
        ("document_id",),
    ),
    FkCase(
        "fk_file_revisions_uploaded_by_known_users",
        t.file_revisions,
        _revision,
        ("uploaded_by",),
        refused_by=UNKNOWN_USER,
    ),
    FkCase(
        "fk_tags_created_by_known_users",
        t.tags,
        lambda w: {"name": "new", "created_by": w["user"]},
        ("created_by",),
        refused_by=UNKNOWN_USER,
    ),
    FkCase(
        "fk_document_tags_document_id_documents",
        t.document_tags,
        lambda w: {"document_id": w["document"], "tag_id": w["tag"]},
        ("document_id",),
    ),
    FkCase(
        "fk_document_tags_tag_id_tags",
        t.document_tags,
        lambda w: {"document_id": w["document"], "tag_id": w["tag"]},
        ("tag_id",),
    ),
    FkCase(
        "fk_metadata_fields_created_by_known_users",
        t.metadata_fields,
        lambda w: {"name": "New", "field_type": "string", "created_by": w["user"]},
        ("created_by",),
        refused_by=UNKNOWN_USER,
    ),
    FkCase(
        "fk_metadata_field_options_field",
        t.metadata_field_options,
        lambda w: {"field_id": w["select_field"], "field_type": "select", "value": "New"},
        ("field_id",),
    ),
    FkCase(
        "fk_document_metadata_document_id_documents",
        t.document_metadata,
        lambda w: {
            "document_id": w["document"],
            "field_id": w["string_field"],
            "field_type": "string",
            "value_string": "x",
        },
        ("document_id",),
    ),
    FkCase(
        "fk_document_metadata_field",
        t.document_metadata,
        lambda w: {
            "document_id": w["document"],
            "field_id": w["string_field"],
            "field_type": "string",
            "value_string": "x",
        },
        ("field_id",),
    ),
    FkCase(
        "fk_document_metadata_option",
        t.document_metadata,
        lambda w: {
            "document_id": w["document"],
            "field_id": w["select_field"],
            "field_type": "select",
            "option_id": w["select_option"],
        },
        ("option_id",),
    ),
    FkCase(
        "fk_document_metadata_choices_value",
        t.document_metadata_choices,
        lambda w: {
            "document_id": w["document"],
            "field_id": w["multi_field"],
            "option_id": w["multi_option"],
        },
        ("document_id",),
    ),
    FkCase(
        "fk_import_provenance_parent_id_folders",
        t.import_provenance,
        lambda w: _provenance(w, parent_id=w["folder"]),
        ("parent_id",),
    ),
    FkCase(
        "fk_import_provenance_folder_id_folders",
        t.import_provenance,
        lambda w: _provenance(w, folder_id=w["folder"]),
        ("folder_id",),
    ),
    FkCase(
        "fk_import_provenance_document_id_documents",
        t.import_provenance,
        lambda w: _provenance(w, document_id=w["document"], sha256="0" * 64),
        ("document_id",),
    ),
    FkCase(
        "fk_import_provenance_imported_by_known_users",
        t.import_provenance,
        lambda w: _provenance(w, folder_id=w["folder"]),
        ("imported_by",),
        refused_by=UNKNOWN_USER,
    ),
    FkCase(
        "fk_document_metadata_choices_option",
        t.document_metadata_choices,
        lambda w: {
            "document_id": w["document"],
            "field_id": w["multi_field"],
            "option_id": w["multi_option"],
        },
        ("option_id",),
    ),
    FkCase(
        "fk_revision_texts_revision_id_file_revisions",
        t.revision_texts,
        lambda w: {"revision_id": w["revision"], "extractor": "text", "parts": 0, "chars": 0},
        ("revision_id",),
    ),
    FkCase(
        "fk_revision_text_parts_revision_id_file_revisions",
        t.revision_text_parts,
        lambda w: {"revision_id": w["revision"], "part_no": 1, "body": "words"},
        ("revision_id",),
    ),
    FkCase(
        "fk_document_search_document_id_documents",
        t.document_search,
        # Part 1 is the document's own row (written by trigger); this one is another part.
        lambda w: {"document_id": w["document"], "part_no": 2, "config": "simple", "terms": "w"},
        ("document_id",),
        as_system=True,
    ),
    # Access control (migration 0016).
    FkCase(
        "fk_folders_owner_id_known_users",
        t.folders,
        lambda w: {"name": "Owned", "created_by": w["user"], "owner_id": w["user"]},
        ("owner_id",),
        refused_by=UNKNOWN_USER,
        when_user_goes="unset",
    ),
    FkCase(
        "fk_documents_owner_id_known_users",
        t.documents,
        lambda w: {"title": "Owned", "created_by": w["user"], "owner_id": w["user"]},
        ("owner_id",),
        refused_by=UNKNOWN_USER,
        when_user_goes="unset",
    ),
    FkCase(
        "fk_access_group_members_group_id_access_groups",
        t.access_group_members,
        lambda w: {"group_id": w["group"], "user_id": w["user"]},
        ("group_id",),
    ),
    FkCase(
        "fk_access_group_members_user_id_known_users",
        t.access_group_members,
        lambda w: {"group_id": w["group"], "user_id": w["user"]},
        ("user_id",),
        refused_by=UNKNOWN_USER,
        when_user_goes="gone",
    ),
    FkCase(
        "fk_access_entries_folder_id_folders",
        t.access_entries,
        _entry(folder_id="folder"),
        ("folder_id",),
    ),
    FkCase(
        "fk_access_entries_document_id_documents",
        t.access_entries,
        _entry(document_id="document"),
        ("document_id",),
    ),
    FkCase(
        "fk_access_entries_user_id_known_users",
        t.access_entries,
        _entry(user_id="user"),
        ("user_id",),
        refused_by=UNKNOWN_USER,
        when_user_goes="gone",
    ),
    FkCase(
        "fk_access_entries_group_id_access_groups",
        t.access_entries,
        _entry(group_id="group"),
        ("group_id",),
    ),
    FkCase(
        "fk_access_scopes_parent_id_access_scopes",
        t.access_scopes,
        lambda w: {"id": uuid.uuid4(), "parent_id": NIL, "inherits": True},
        ("parent_id",),
        derived=True,
    ),
    FkCase(
        "fk_access_grants_scope_id_access_scopes",
        t.access_grants,
        lambda w: {"scope_id": NIL, "principal_id": uuid.uuid4(), "rights": 1},
        ("scope_id",),
        derived=True,
    ),
]


#: The cases as parameters: a derived table's only on plain PostgreSQL, where its rule can be
#: disabled for a transaction (Citus refuses ALTER TABLE ... DISABLE TRIGGER on its tables).
_REACHABLE = [
    pytest.param(case, marks=pytest.mark.plain_only) if case.derived else case for case in FK_CASES
]


def _reach(conn: Connection, case: FkCase) -> None:
    """Let a direct insert reach ``case``'s table (for this transaction: it is rolled back)."""
    if case.as_system:
        acting = {ACTOR_SETTING: "system:test"}
        if not citus.set_local_on_every_node(conn, acting):
            conn.execute(sa.select(sa.func.set_config(ACTOR_SETTING, "system:test", True)))
    if case.derived:
        schema = conn.get_execution_options()["schema_translate_map"][None]
        table = sql.Identifier(schema, case.table.name)
        execute_ddl(conn, sql.SQL("ALTER TABLE {} DISABLE TRIGGER access_rules").format(table))


def _count(conn: Connection, table: sa.Table) -> int:
    return int(conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


@pytest.mark.parametrize("case", _REACHABLE, ids=lambda case: case.constraint)
def test_unknown_reference_is_refused(tenant_conn: Connection, world: World, case: FkCase) -> None:
    values = case.row(world) | {column: uuid.uuid4() for column in case.broken}
    _reach(tenant_conn, case)
    before = _count(tenant_conn, case.table)

    with pytest.raises(IntegrityError) as excinfo, tenant_conn.begin_nested():
        tenant_conn.execute(sa.insert(case.table).values(**values))

    orig = excinfo.value.orig
    assert type(orig) is psycopg.errors.ForeignKeyViolation
    assert violated_rule(orig) == (case.refused_by or case.constraint)
    assert _count(tenant_conn, case.table) == before


@pytest.mark.parametrize("case", _REACHABLE, ids=lambda case: case.constraint)
def test_same_row_with_known_reference_is_accepted(
    tenant_conn: Connection, world: World, case: FkCase
) -> None:
    """Control: the negative case fails only because of the unknown id."""
    _reach(tenant_conn, case)
    before = _count(tenant_conn, case.table)

    tenant_conn.execute(sa.insert(case.table).values(**case.row(world)))

    assert _count(tenant_conn, case.table) == before + 1


@pytest.mark.parametrize(
    "case",
    [case for case in FK_CASES if case.refused_by and case.when_user_goes == "refused"],
    ids=lambda case: case.constraint,
)
def test_a_known_user_whom_a_row_names_stays_known(
    engine: Engine, tenant_conn: Connection, world: World, case: FkCase
) -> None:
    """The keys to known_users themselves: its row of a user cannot go while a row names them."""
    author = _new_user(engine)
    tenant_conn.execute(
        sa.insert(case.table).values(**case.row(world) | dict.fromkeys(case.broken, author))
    )
    known = t.known_users.c.id == author

    with pytest.raises(IntegrityError) as excinfo, tenant_conn.begin_nested():
        tenant_conn.execute(sa.delete(t.known_users).where(known))

    orig = excinfo.value.orig
    assert isinstance(orig, psycopg.Error)
    assert violated_rule(orig) == case.constraint
    assert tenant_conn.scalar(sa.select(sa.func.count()).where(known)) == 1


_FOREIGN_KEYS = sa.text(
    """
    SELECT c.conname, c.conrelid::regclass::text AS table_name,
           EXISTS (
               SELECT 1 FROM pg_index i
                WHERE i.indrelid = c.conrelid AND i.indkey[0] = c.conkey[1]
           ) AS leading_index
      FROM pg_constraint c
     WHERE c.contype = 'f' AND c.connamespace = CAST(:schema AS regnamespace)
    """
)


def _catalog_foreign_keys(conn: Connection, slug: str) -> dict[str, bool]:
    rows = conn.execute(_FOREIGN_KEYS, {"schema": tenancy.schema_name(slug)})
    return {row.conname: row.leading_index for row in rows}


def test_every_catalog_foreign_key_has_a_negative_test(
    tenant_conn: Connection, tenant: str
) -> None:
    in_catalog = set(_catalog_foreign_keys(tenant_conn, tenant))

    assert in_catalog == {case.constraint for case in FK_CASES}


def test_declared_foreign_keys_match_the_catalog(tenant_conn: Connection, tenant: str) -> None:
    declared = {
        constraint.name
        for table in t.metadata.tables.values()
        for constraint in table.foreign_key_constraints
    }

    assert declared == set(_catalog_foreign_keys(tenant_conn, tenant))


def test_every_foreign_key_has_an_index_on_its_leading_column(
    tenant_conn: Connection, tenant: str
) -> None:
    foreign_keys = _catalog_foreign_keys(tenant_conn, tenant)

    assert foreign_keys, "no foreign keys found: the catalog query is wrong"
    assert sorted(name for name, indexed in foreign_keys.items() if not indexed) == []


@pytest.mark.parametrize(
    "case",
    [case for case in FK_CASES if case.when_user_goes != "refused"],
    ids=lambda case: case.constraint,
)
def test_a_users_removal_takes_their_memberships_and_entries_and_clears_what_they_own(
    engine: Engine, tenant_conn: Connection, world: World, case: FkCase
) -> None:
    """Access rows name a user without holding them: the key follows the user's removal."""
    author = _new_user(engine)
    row = case.row(world) | dict.fromkeys(case.broken, author)
    key = tenant_conn.execute(
        sa.insert(case.table).values(**row).returning(*case.table.primary_key)
    )
    where = [
        column == value for column, value in zip(case.table.primary_key, key.one(), strict=True)
    ]

    tenant_conn.execute(sa.delete(t.known_users).where(t.known_users.c.id == author))

    left = tenant_conn.execute(sa.select(case.table.c[case.broken[0]]).where(*where)).all()
    assert left == ([] if case.when_user_goes == "gone" else [(None,)])
