"""The schema that the migrations build is the schema that the table definitions declare.

Two schemas in one database: one built by running every migration, one by
``MetaData.create_all`` of :mod:`dms.schema`; their catalog fingerprints must be equal. Triggers
and functions exist only in migrations (Core cannot declare them) and are checked by name.
``alembic check`` must find nothing to generate, and must find drift when there is some.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.schema import CreateSchema

from dms import migrations, provisioning
from dms.config import SHARED_SCHEMA
from dms.schema import shared, tenant
from dms.testing import temporary_database
from dms.users import create_users_stand_in
from tests.migrations.fingerprint import fingerprint, run_alembic

TENANT_TRIGGERS = {
    ("file_revisions", "file_revisions_guard"),
    ("folders", "folders_guard"),
    *(
        (table, "known_users_enlist")
        for table in (
            "folders",
            "documents",
            "file_revisions",
            "tags",
            "metadata_fields",
            "import_provenance",
        )
    ),
    # Keep document_search in step with what it indexes (migration 0009).
    ("documents", "search_documents_changed"),
    ("document_tags", "search_links_changed"),
    ("document_metadata", "search_links_changed"),
    ("tags", "search_tag_renamed"),
    ("revision_texts", "search_text_extracted"),
    # ... and its filters in step with the folders and tags (migration 0010).
    ("document_search", "search_filters_row"),
    ("documents", "search_document_moved"),
    ("folders", "search_folder_moved"),
    # ... and its copies of each document's scope and owner (migration 0021).
    ("document_search", "search_access_row"),
    ("documents", "search_access_changed"),
    # The audit trail (migration 0013).
    ("audit_events", "audit_stamp"),
    ("audit_events", "audit_guard"),
    ("audit_events", "audit_no_truncate"),
    ("audit_checkpoints", "audit_guard"),
    ("audit_checkpoints", "audit_no_truncate"),
    *(
        (table, "audit_row")
        for table in (
            "documents",
            "file_revisions",
            "folders",
            "tags",
            "metadata_fields",
            "metadata_field_options",
            "document_metadata",
        )
    ),
    *(
        (table, f"audit_links_{event}")
        for table in ("document_tags", "document_metadata_choices")
        for event in ("insert", "delete")
    ),
    # Access control (migration 0016): rights checked before every write, scopes kept after.
    *(
        (table, "access_rules")
        for table in (
            "folders",
            "documents",
            "file_revisions",
            "document_tags",
            "document_metadata",
            "document_metadata_choices",
            "revision_texts",
            "revision_text_parts",
            "access_entries",
            "access_groups",
            "access_group_members",
            "access_scopes",
            "access_grants",
            "tags",
            "metadata_fields",
            "metadata_field_options",
        )
    ),
    ("folders", "access_placed"),
    *(
        (table, "audit_row")
        for table in ("access_entries", "access_groups", "access_group_members")
    ),
    *(
        (table, trigger)
        for table in ("folders", "documents")
        for trigger in ("access_moved", "access_deleted")
    ),
    ("access_entries", "access_changed"),
}


def _migrated_database(url: URL) -> Engine:
    engine = sa.create_engine(url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    provisioning.create_tenant(engine, "migrated")
    return engine


@pytest.fixture(scope="module")
def db(server_url: URL) -> Iterator[Engine]:
    """A database at head with tenant ``migrated``, plus schemas built by ``create_all``.

    Shared by the read-only tests of this module (per xdist worker): ``declared_tenant`` from
    :mod:`dms.schema.tenant`, ``declared_shared`` from :mod:`dms.schema.shared`.
    """
    with temporary_database(server_url, prefix="dms_declared") as url:
        engine = _migrated_database(url)
        _create_declared(engine, tenant.metadata, "declared_tenant", None)
        _create_declared(engine, shared.metadata, "declared_shared", SHARED_SCHEMA)
        yield engine
        engine.dispose()


def _create_declared(
    engine: Engine, metadata: sa.MetaData, schema: str, source: str | None
) -> None:
    tables = [table for table in metadata.sorted_tables if table.name != "users"]
    with engine.begin() as conn:
        conn.execute(CreateSchema(schema))
        routed = conn.execution_options(schema_translate_map={source: schema})
        metadata.create_all(routed, tables=tables, checkfirst=False)


def test_migrated_tenant_schema_equals_declared_tables(db: Engine) -> None:
    migrated = fingerprint(db, "tenant_migrated")
    declared = fingerprint(db, "declared_tenant")

    assert migrated.tables, "the migrated tenant schema is empty"
    assert migrated.structure() == declared.structure()


def test_triggers_and_functions_exist_only_in_migrations(db: Engine, on_citus: bool) -> None:
    migrated = fingerprint(db, "tenant_migrated")
    declared = fingerprint(db, "declared_tenant")

    assert {(row[0], row[1]) for row in migrated.triggers} == TENANT_TRIGGERS
    assert {row[0] for row in migrated.functions} == {
        "file_revisions_guard",
        "folders_guard",
        "known_users_enlist",
        "search_filters",
        "search_fold",
        "search_header",
        "search_rebuild",
        "search_refresh_filters",
        "search_refresh_header",
        # Searches that keep their indexes under row-level security (revision 0017).
        "search_visible_parts",
        "search_visible_titles",
        # What a search chooses its path by (revision 0020).
        "search_matches",
        "search_narrows",
        "search_scope_share",
        *(trigger for _table, trigger in TENANT_TRIGGERS if trigger.startswith("search_")),
        *("audit_stamp", "audit_guard", "audit_refuse", "audit_row", "audit_links"),
        *(
            f"access_{name}"
            for name in (
                "user",
                "system",
                "principals",
                "allows",
                "right_names",
                "require",
                "folder_scope",
                "folder_owner",
                "require_in_folder",
                "enlist",
                "refresh",
                "repoint",
                "folder_becomes_scope",
                "document_becomes_scope",
                "folder_rules",
                "folder_changed",
                "document_rules",
                "document_moved",
                "object_deleted",
                "content_rules",
                "entry_rules",
                "entry_changed",
                "root_rules",
                "derived_only",
            )
        ),
        # On Citus the policies are functions of the row (revisions 0016 and 0019).
        *(
            f"access_{name}_visible"
            for name in ("object", "document", "document_row", "revision", "entry", "event")
            if on_citus
        ),
    }
    # The functions pin search_path to their own schema (normalised), not to the caller's.
    assert all("search_path TO '<schema>'" in str(row[2]) for row in migrated.functions)
    assert declared.triggers == ()
    assert declared.functions == ()


def test_migrated_shared_schema_equals_declared_tables(db: Engine) -> None:
    migrated = fingerprint(db, SHARED_SCHEMA)
    declared = fingerprint(db, "declared_shared")

    assert "tenants" in {row[0] for row in migrated.tables}
    assert migrated == declared


def test_alembic_check_finds_nothing_to_generate(db: Engine) -> None:
    result = run_alembic(db.url, "check")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "No new upgrade operations detected" in result.stdout


def test_alembic_check_reports_drift_in_a_tenant(empty_database_url: URL) -> None:
    engine = _migrated_database(empty_database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE tenant_migrated.tags ADD COLUMN colour text"))
    finally:
        engine.dispose()

    result = run_alembic(empty_database_url, "check")

    assert result.returncode != 0
    assert "New upgrade operations detected" in result.stdout
    assert "colour" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
