"""Row factories for applications' own tests (factory-boy: ``pip install 'dms[testing]'``).

Factories build valid rows with overrides and insert them with Core on a connection routed to a
tenant::

    with engine.begin() as conn:
        tenant_conn = tenancy.route(conn, "acme")
        user_id = create_user(conn, email="a@example.org", display_name="A")
        folder = FolderFactory(conn=tenant_conn, created_by=user_id)
        doc = DocumentFactory(conn=tenant_conn, created_by=user_id, folder_id=folder["id"])

Each factory returns the inserted row as a mapping (every column, defaults included).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

import factory
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms.schema import tenant as t


class RowFactory(factory.Factory):  # type: ignore[misc]
    """Base of the row factories: ``Factory(conn=..., **overrides)`` inserts one row."""

    class Meta:
        abstract = True

    @classmethod
    def _create(
        cls, model_class: sa.Table, *args: Any, conn: Connection, **values: Any
    ) -> Mapping[str, Any]:
        # Every column the table has at the schema's revision (a test may stand at an older one
        # than the declared table), read back with the server's defaults.
        inserted: sa.Executable = (
            sa.insert(model_class).values(**values).returning(sa.literal_column("*"))
        )
        row = conn.execute(inserted).one()
        return dict(row._mapping)

    @classmethod
    def _build(cls, model_class: Any, *args: Any, **values: Any) -> dict[str, Any]:
        values.pop("conn", None)
        return dict(values)


class FolderFactory(RowFactory):
    """A top-level folder (pass ``parent_id`` to nest it)."""

    class Meta:
        model = t.folders

    name = factory.Sequence(lambda n: f"Folder {n}")


class DocumentFactory(RowFactory):
    """A document without revisions."""

    class Meta:
        model = t.documents

    title = factory.Sequence(lambda n: f"Document {n}.pdf")


class RevisionFactory(RowFactory):
    """The next revision of ``document_id`` (the database numbers it)."""

    class Meta:
        model = t.file_revisions

    storage_key = factory.LazyFunction(lambda: f"blobs/{uuid.uuid4()}")
    sha256 = factory.LazyAttribute(lambda o: hashlib.sha256(o.storage_key.encode()).hexdigest())
    size_bytes = 1024
    mime_type = "application/pdf"


class TagFactory(RowFactory):
    """A tag."""

    class Meta:
        model = t.tags

    name = factory.Sequence(lambda n: f"tag-{n}")


class DocumentTagFactory(RowFactory):
    """A link between a document and a tag."""

    class Meta:
        model = t.document_tags


class MetadataFieldFactory(RowFactory):
    """A metadata field, a string field unless ``field_type`` says otherwise."""

    class Meta:
        model = t.metadata_fields

    name = factory.Sequence(lambda n: f"Field {n}")
    field_type = "string"


class MetadataOptionFactory(RowFactory):
    """An option of a select or multi-select field (pass ``field_id`` and ``field_type``)."""

    class Meta:
        model = t.metadata_field_options

    value = factory.Sequence(lambda n: f"Option {n}")


class MetadataValueFactory(RowFactory):
    """A metadata value (pass ``document_id``, ``field_id``, ``field_type`` and its column)."""

    class Meta:
        model = t.document_metadata


class DocumentMetadataChoiceFactory(RowFactory):
    """One chosen option of a multi-select value.

    Pass ``document_id``, ``field_id`` and ``option_id``; the value row it belongs to (a
    :class:`MetadataValueFactory` row with ``field_type="multi_select"``) must exist.
    """

    class Meta:
        model = t.document_metadata_choices
