"""The row factories of :mod:`dms.testing.factories`: valid rows by default, overrides honoured."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms.schema import tenant as t
from dms.testing.factories import (
    DocumentFactory,
    DocumentMetadataChoiceFactory,
    DocumentTagFactory,
    FolderFactory,
    MetadataFieldFactory,
    MetadataOptionFactory,
    MetadataValueFactory,
    RevisionFactory,
    TagFactory,
)


def stored(conn: Connection, table: sa.Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """The row of ``table`` with ``row``'s primary key, as the database has it."""
    key = [column == row[column.name] for column in table.primary_key.columns]
    return dict(conn.execute(sa.select(table).where(*key)).one()._mapping)


def test_folder_defaults_and_overrides(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    first = FolderFactory(conn=tenant_conn, created_by=user_id)
    second = FolderFactory(conn=tenant_conn, created_by=user_id)
    child = FolderFactory(conn=tenant_conn, created_by=user_id, parent_id=first["id"], name="C")
    assert stored(tenant_conn, t.folders, first) == first
    assert first["name"] != second["name"]
    assert first["parent_id"] is None
    assert first["deleted_at"] is None
    assert (child["name"], child["parent_id"]) == ("C", first["id"])


def test_document_defaults_and_overrides(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    folder = FolderFactory(conn=tenant_conn, created_by=user_id)
    doc = DocumentFactory(conn=tenant_conn, created_by=user_id)
    other = DocumentFactory(conn=tenant_conn, created_by=user_id, folder_id=folder["id"], title="X")
    assert stored(tenant_conn, t.documents, doc) == doc
    assert doc["version"] == 1
    assert doc["current_revision_id"] is None
    assert doc["title"].endswith(".pdf")
    assert (other["title"], other["folder_id"]) == ("X", folder["id"])


def test_revisions_are_numbered_by_the_database(
    tenant_conn: Connection, user_id: uuid.UUID
) -> None:
    doc = DocumentFactory(conn=tenant_conn, created_by=user_id)
    first = RevisionFactory(conn=tenant_conn, document_id=doc["id"], uploaded_by=user_id)
    second = RevisionFactory(
        conn=tenant_conn,
        document_id=doc["id"],
        uploaded_by=user_id,
        mime_type="text/plain",
        size_bytes=7,
    )
    assert stored(tenant_conn, t.file_revisions, first) == first
    assert (first["revision_no"], second["revision_no"]) == (1, 2)
    assert first["storage_key"] != second["storage_key"]
    assert len(first["sha256"]) == 64
    assert (second["mime_type"], second["size_bytes"]) == ("text/plain", 7)


def test_tags_and_links(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    tag = TagFactory(conn=tenant_conn, created_by=user_id)
    named = TagFactory(conn=tenant_conn, created_by=user_id, name="Urgent")
    doc = DocumentFactory(conn=tenant_conn, created_by=user_id)
    link = DocumentTagFactory(conn=tenant_conn, document_id=doc["id"], tag_id=named["id"])
    assert stored(tenant_conn, t.tags, tag) == tag
    assert tag["name"] != named["name"] == "Urgent"
    assert stored(tenant_conn, t.document_tags, link) == link
    assert (link["document_id"], link["tag_id"]) == (doc["id"], named["id"])


def test_fields_options_and_values(tenant_conn: Connection, user_id: uuid.UUID) -> None:
    text = MetadataFieldFactory(conn=tenant_conn, created_by=user_id)
    topics = MetadataFieldFactory(
        conn=tenant_conn, created_by=user_id, field_type="multi_select", required=True
    )
    option = MetadataOptionFactory(
        conn=tenant_conn, field_id=topics["id"], field_type="multi_select"
    )
    named = MetadataOptionFactory(
        conn=tenant_conn, field_id=topics["id"], field_type="multi_select", value="Tax"
    )
    assert stored(tenant_conn, t.metadata_fields, text) == text
    assert (text["field_type"], text["required"]) == ("string", False)
    assert (topics["field_type"], topics["required"]) == ("multi_select", True)
    assert stored(tenant_conn, t.metadata_field_options, option) == option
    assert option["value"] != named["value"] == "Tax"

    doc = DocumentFactory(conn=tenant_conn, created_by=user_id)
    value = MetadataValueFactory(
        conn=tenant_conn,
        document_id=doc["id"],
        field_id=text["id"],
        field_type="string",
        value_string="ACME",
    )
    assert stored(tenant_conn, t.document_metadata, value) == value
    assert value["value_string"] == "ACME"

    chosen = MetadataValueFactory(
        conn=tenant_conn, document_id=doc["id"], field_id=topics["id"], field_type="multi_select"
    )
    choice = DocumentMetadataChoiceFactory(
        conn=tenant_conn, document_id=doc["id"], field_id=topics["id"], option_id=named["id"]
    )
    assert chosen["value_string"] is None
    assert stored(tenant_conn, t.document_metadata_choices, choice) == choice
    assert (choice["option_id"], choice["field_type"]) == (named["id"], "multi_select")


def test_build_inserts_nothing(tenant_conn: Connection) -> None:
    built = DocumentFactory.build(title="Draft.pdf")
    assert built == {"title": "Draft.pdf"}
    count = tenant_conn.scalar(sa.select(sa.func.count()).select_from(t.documents))
    assert count == 0
