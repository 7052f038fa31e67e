"""Tenant registry; documents, revisions, folders, tags and metadata fields.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Shared: ``dms.tenants``. Tenant: every entity table with its invariants, including the two
trigger functions (gap-free append-only revisions; acyclic folder tree with a depth limit).
Trigger functions live in the tenant schema and pin ``search_path`` to it, so their static SQL
names the tenant's own tables whatever the caller's ``search_path`` is. The tenant part adds
its foreign keys to ``users`` last (see ``_add_user_references``).
"""

from __future__ import annotations

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.schema import DropSchema

from alembic import op
from dms.errors import MigrationError
from dms.migrations import MigrationScope
from dms.schema.ddl import execute_ddl

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

MAX_FOLDER_DEPTH = 32
FIELD_TYPES = "'string', 'text', 'int', 'decimal', 'date', 'bool', 'url', 'select', 'multi_select'"
VALUE_COLUMNS = (
    "value_string, value_text, value_int, value_decimal, value_date, value_bool, value_url, "
    "option_id"
)
VALUE_CASES = (
    "WHEN 'string' THEN value_string IS NOT NULL WHEN 'text' THEN value_text IS NOT NULL "
    "WHEN 'int' THEN value_int IS NOT NULL WHEN 'decimal' THEN value_decimal IS NOT NULL "
    "WHEN 'date' THEN value_date IS NOT NULL WHEN 'bool' THEN value_bool IS NOT NULL "
    "WHEN 'url' THEN value_url IS NOT NULL WHEN 'select' THEN option_id IS NOT NULL"
)


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema)
        _add_user_references(scope.schema, scope.users_schema)
    else:
        _upgrade_shared(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)
    else:
        _downgrade_shared(scope.schema)


# --- shared -------------------------------------------------------------------------------


def _upgrade_shared(schema: str) -> None:
    op.create_table(
        "tenants",
        sa.Column("slug", sa.Text, nullable=False),
        sa.Column("schema_name", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False, server_default="active"),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint("slug", name="pk_tenants"),
        sa.UniqueConstraint("schema_name", name="uq_tenants_schema_name"),
        sa.CheckConstraint("slug ~ '^[a-z][a-z0-9_]{0,39}$'", name=op.f("ck_tenants_slug_format")),
        sa.CheckConstraint(
            "schema_name = 'tenant_' || slug", name=op.f("ck_tenants_schema_name_from_slug")
        ),
        sa.CheckConstraint("state IN ('active', 'suspended')", name=op.f("ck_tenants_state_known")),
        schema=schema,
    )


def _downgrade_shared(schema: str) -> None:
    """Drop the registry, and the tenant schemas it lists, which must be empty by now.

    Tenants are downgraded before the shared schema, so at base each holds only its version
    table; a schema with anything else in it means a tenant was not downgraded, and nothing
    is dropped.
    """
    bind = op.get_bind()
    registry = sa.table("tenants", sa.column("schema_name", sa.Text), schema=schema)
    pg_tables = sa.table("pg_tables", sa.column("schemaname"), sa.column("tablename"))
    schemas = bind.scalars(sa.select(registry.c.schema_name)).all()
    not_empty = bind.scalars(
        sa.select(pg_tables.c.schemaname)
        .where(pg_tables.c.schemaname.in_(schemas), pg_tables.c.tablename != "alembic_version")
        .distinct()
    ).all()
    if not_empty:
        raise MigrationError(
            f"cannot remove the tenant registry: {', '.join(sorted(not_empty))} still hold "
            "tables; downgrade every tenant to base first"
        )
    for tenant_schema in schemas:
        op.execute(DropSchema(tenant_schema, cascade=True, if_exists=True))
    op.drop_table("tenants", schema=schema)


# --- tenant -------------------------------------------------------------------------------


def _id() -> sa.Column[object]:
    return sa.Column("id", sa.Uuid, nullable=False, server_default=sa.func.gen_random_uuid())


def _timestamp(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now())


#: The columns that reference the IAM's users, as (table, column).
USER_REFERENCES = (
    ("folders", "created_by"),
    ("documents", "created_by"),
    ("file_revisions", "uploaded_by"),
    ("tags", "created_by"),
    ("metadata_fields", "created_by"),
)


def _upgrade_tenant(schema: str) -> None:
    _create_folders(schema)
    _create_documents(schema)
    _create_tags(schema)
    _create_metadata(schema)
    _create_revision_guard(schema)
    _create_folder_guard(schema)


def _add_user_references(schema: str, users_schema: str) -> None:
    """The foreign keys to users, last: each locks users (SHARE ROW EXCLUSIVE) until commit.

    Added last, they hold that lock for the end of the transaction only, so writes to users
    (the IAM's sign-ups) and tenants created in parallel wait for a few statements instead of
    the whole tenant.
    """
    for table, column in USER_REFERENCES:
        op.create_foreign_key(
            f"fk_{table}_{column}_users",
            table,
            "users",
            [column],
            ["id"],
            source_schema=schema,
            referent_schema=users_schema,
            ondelete="RESTRICT",
        )


def _create_folders(schema: str) -> None:
    op.create_table(
        "folders",
        _id(),
        sa.Column("parent_id", sa.Uuid),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("created_by", sa.Uuid, nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.Column("deleted_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_folders"),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            [f"{schema}.folders.id"],
            name="fk_folders_parent_id_folders",
            ondelete="RESTRICT",
        ),
        sa.CheckConstraint(
            "btrim(name) <> '' AND strpos(name, '/') = 0 AND length(name) <= 255",
            name=op.f("ck_folders_name_valid"),
        ),
        sa.CheckConstraint("parent_id <> id", name=op.f("ck_folders_not_own_parent")),
        schema=schema,
    )
    op.create_index("ix_folders_parent_id", "folders", ["parent_id"], schema=schema)
    op.create_index("ix_folders_created_by", "folders", ["created_by"], schema=schema)
    op.create_index(
        "uq_folders_sibling_name",
        "folders",
        ["parent_id", sa.text("lower(name)")],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("deleted_at IS NULL"),
        postgresql_nulls_not_distinct=True,
    )


def _create_documents(schema: str) -> None:
    op.create_table(
        "documents",
        _id(),
        sa.Column("folder_id", sa.Uuid),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("current_revision_id", sa.Uuid),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_by", sa.Uuid, nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.Column("deleted_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_documents"),
        sa.ForeignKeyConstraint(
            ["folder_id"],
            [f"{schema}.folders.id"],
            name="fk_documents_folder_id_folders",
            ondelete="RESTRICT",
        ),
        sa.CheckConstraint(
            "btrim(title) <> '' AND length(title) <= 500", name=op.f("ck_documents_title_valid")
        ),
        sa.CheckConstraint("version >= 1", name=op.f("ck_documents_version_positive")),
        schema=schema,
    )
    op.create_index("ix_documents_folder_id", "documents", ["folder_id"], schema=schema)
    op.create_index("ix_documents_created_by", "documents", ["created_by"], schema=schema)
    op.create_index(
        "ix_documents_current_revision_id", "documents", ["current_revision_id"], schema=schema
    )
    op.create_index(
        "uq_documents_folder_title",
        "documents",
        ["folder_id", sa.text("lower(title)")],
        unique=True,
        schema=schema,
        postgresql_where=sa.text("deleted_at IS NULL"),
        postgresql_nulls_not_distinct=True,
    )
    op.create_table(
        "file_revisions",
        _id(),
        sa.Column("document_id", sa.Uuid, nullable=False),
        sa.Column("revision_no", sa.Integer, nullable=False),
        sa.Column("storage_key", sa.Text, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("mime_type", sa.Text, nullable=False),
        sa.Column("uploaded_by", sa.Uuid, nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_file_revisions"),
        sa.ForeignKeyConstraint(
            ["document_id"],
            [f"{schema}.documents.id"],
            name="fk_file_revisions_document_id_documents",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "document_id", "revision_no", name="uq_file_revisions_document_id_revision_no"
        ),
        sa.UniqueConstraint("document_id", "id", name="uq_file_revisions_document_id_id"),
        sa.UniqueConstraint("storage_key", name="uq_file_revisions_storage_key"),
        sa.CheckConstraint("revision_no >= 1", name=op.f("ck_file_revisions_revision_no_positive")),
        sa.CheckConstraint("size_bytes >= 0", name=op.f("ck_file_revisions_size_not_negative")),
        sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name=op.f("ck_file_revisions_sha256_hex")),
        sa.CheckConstraint(
            "btrim(storage_key) <> ''", name=op.f("ck_file_revisions_storage_key_not_blank")
        ),
        sa.CheckConstraint(
            "mime_type ~ '^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*'",
            name=op.f("ck_file_revisions_mime_type_valid"),
        ),
        schema=schema,
    )
    op.create_index("ix_file_revisions_sha256", "file_revisions", ["sha256"], schema=schema)
    op.create_index(
        "ix_file_revisions_uploaded_by", "file_revisions", ["uploaded_by"], schema=schema
    )
    # Added after both tables exist: documents and revisions reference each other.
    op.create_foreign_key(
        "fk_documents_current_revision",
        "documents",
        "file_revisions",
        ["id", "current_revision_id"],
        ["document_id", "id"],
        source_schema=schema,
        referent_schema=schema,
    )


def _create_tags(schema: str) -> None:
    op.create_table(
        "tags",
        _id(),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("created_by", sa.Uuid, nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_tags"),
        sa.CheckConstraint(
            "btrim(name) <> '' AND length(name) <= 100", name=op.f("ck_tags_name_valid")
        ),
        schema=schema,
    )
    op.create_index("uq_tags_name", "tags", [sa.text("lower(name)")], unique=True, schema=schema)
    op.create_index("ix_tags_created_by", "tags", ["created_by"], schema=schema)
    op.create_table(
        "document_tags",
        sa.Column("document_id", sa.Uuid, nullable=False),
        sa.Column("tag_id", sa.Uuid, nullable=False),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("document_id", "tag_id", name="pk_document_tags"),
        sa.ForeignKeyConstraint(
            ["document_id"],
            [f"{schema}.documents.id"],
            name="fk_document_tags_document_id_documents",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tag_id"],
            [f"{schema}.tags.id"],
            name="fk_document_tags_tag_id_tags",
            ondelete="CASCADE",
        ),
        schema=schema,
    )
    op.create_index("ix_document_tags_tag_id", "document_tags", ["tag_id"], schema=schema)


def _create_metadata(schema: str) -> None:
    op.create_table(
        "metadata_fields",
        _id(),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("field_type", sa.Text, nullable=False),
        sa.Column("required", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("default_value", JSONB),
        sa.Column("created_by", sa.Uuid, nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_metadata_fields"),
        sa.UniqueConstraint("id", "field_type", name="uq_metadata_fields_id_field_type"),
        sa.CheckConstraint(
            "btrim(name) <> '' AND length(name) <= 100", name=op.f("ck_metadata_fields_name_valid")
        ),
        sa.CheckConstraint(
            f"field_type IN ({FIELD_TYPES})", name=op.f("ck_metadata_fields_field_type_known")
        ),
        schema=schema,
    )
    op.create_index(
        "uq_metadata_fields_name",
        "metadata_fields",
        [sa.text("lower(name)")],
        unique=True,
        schema=schema,
    )
    op.create_index(
        "ix_metadata_fields_created_by", "metadata_fields", ["created_by"], schema=schema
    )
    op.create_table(
        "metadata_field_options",
        _id(),
        sa.Column("field_id", sa.Uuid, nullable=False),
        sa.Column("field_type", sa.Text, nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("position", sa.Integer, nullable=False, server_default="0"),
        sa.Column("retired_at", sa.DateTime(timezone=True)),
        _timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_metadata_field_options"),
        sa.ForeignKeyConstraint(
            ["field_id", "field_type"],
            [f"{schema}.metadata_fields.id", f"{schema}.metadata_fields.field_type"],
            name="fk_metadata_field_options_field",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("field_id", "id", name="uq_metadata_field_options_field_id_id"),
        sa.CheckConstraint(
            "field_type IN ('select', 'multi_select')",
            name=op.f("ck_metadata_field_options_field_has_options"),
        ),
        sa.CheckConstraint(
            "btrim(value) <> '' AND length(value) <= 200",
            name=op.f("ck_metadata_field_options_value_valid"),
        ),
        schema=schema,
    )
    op.create_index(
        "uq_metadata_field_options_value",
        "metadata_field_options",
        ["field_id", sa.text("lower(value)")],
        unique=True,
        schema=schema,
    )
    _create_document_metadata(schema)


def _create_document_metadata(schema: str) -> None:
    op.create_table(
        "document_metadata",
        sa.Column("document_id", sa.Uuid, nullable=False),
        sa.Column("field_id", sa.Uuid, nullable=False),
        sa.Column("field_type", sa.Text, nullable=False),
        sa.Column("value_string", sa.Text),
        sa.Column("value_text", sa.Text),
        sa.Column("value_int", sa.BigInteger),
        sa.Column("value_decimal", sa.Numeric),
        sa.Column("value_date", sa.Date),
        sa.Column("value_bool", sa.Boolean),
        sa.Column("value_url", sa.Text),
        sa.Column("option_id", sa.Uuid),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("document_id", "field_id", name="pk_document_metadata"),
        sa.ForeignKeyConstraint(
            ["document_id"],
            [f"{schema}.documents.id"],
            name="fk_document_metadata_document_id_documents",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["field_id", "field_type"],
            [f"{schema}.metadata_fields.id", f"{schema}.metadata_fields.field_type"],
            name="fk_document_metadata_field",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["field_id", "option_id"],
            [f"{schema}.metadata_field_options.field_id", f"{schema}.metadata_field_options.id"],
            name="fk_document_metadata_option",
            ondelete="RESTRICT",
        ),
        sa.UniqueConstraint(
            "document_id",
            "field_id",
            "field_type",
            name="uq_document_metadata_document_id_field_id_field_type",
        ),
        sa.CheckConstraint(
            f"num_nonnulls({VALUE_COLUMNS}) = (field_type <> 'multi_select')::int "
            f"AND CASE field_type {VALUE_CASES} ELSE true END",
            name=op.f("ck_document_metadata_value_matches_type"),
        ),
        sa.CheckConstraint(
            "value_url ~ '^https?://[^[:space:]]+$'", name=op.f("ck_document_metadata_url_valid")
        ),
        schema=schema,
    )
    op.create_index(
        "ix_document_metadata_field_option",
        "document_metadata",
        ["field_id", "option_id"],
        schema=schema,
    )
    for column in ("value_string", "value_int", "value_decimal", "value_date"):
        op.create_index(
            f"ix_document_metadata_field_{column}",
            "document_metadata",
            ["field_id", column],
            schema=schema,
        )
    op.create_table(
        "document_metadata_choices",
        sa.Column("document_id", sa.Uuid, nullable=False),
        sa.Column("field_id", sa.Uuid, nullable=False),
        sa.Column("option_id", sa.Uuid, nullable=False),
        sa.Column("field_type", sa.Text, nullable=False, server_default="multi_select"),
        sa.PrimaryKeyConstraint(
            "document_id", "field_id", "option_id", name="pk_document_metadata_choices"
        ),
        sa.ForeignKeyConstraint(
            ["document_id", "field_id", "field_type"],
            [
                f"{schema}.document_metadata.document_id",
                f"{schema}.document_metadata.field_id",
                f"{schema}.document_metadata.field_type",
            ],
            name="fk_document_metadata_choices_value",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["field_id", "option_id"],
            [f"{schema}.metadata_field_options.field_id", f"{schema}.metadata_field_options.id"],
            name="fk_document_metadata_choices_option",
            ondelete="RESTRICT",
        ),
        sa.CheckConstraint(
            "field_type = 'multi_select'",
            name=op.f("ck_document_metadata_choices_multi_select_only"),
        ),
        schema=schema,
    )
    op.create_index(
        "ix_document_metadata_choices_field_option",
        "document_metadata_choices",
        ["field_id", "option_id"],
        schema=schema,
    )


# Revisions: numbered 1, 2, 3 ... per document with no gap, and append-only. Concurrent uploads
# to one document serialise on the document's row lock, so each sees the other's number.
REVISION_GUARD = """
DECLARE
    next_no integer;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM 1 FROM documents WHERE id = NEW.document_id FOR UPDATE;
        SELECT coalesce(max(revision_no), 0) + 1 INTO next_no
          FROM file_revisions WHERE document_id = NEW.document_id;
        IF NEW.revision_no IS NULL THEN
            NEW.revision_no := next_no;
        ELSIF NEW.revision_no <> next_no THEN
            RAISE EXCEPTION 'revision % of document % breaks the sequence: the next is %',
                NEW.revision_no, NEW.document_id, next_no
                USING ERRCODE = 'check_violation', CONSTRAINT = 'file_revisions_gap_free';
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        IF (NEW.document_id, NEW.revision_no, NEW.storage_key, NEW.sha256, NEW.size_bytes,
            NEW.mime_type, NEW.uploaded_by)
           IS DISTINCT FROM
           (OLD.document_id, OLD.revision_no, OLD.storage_key, OLD.sha256, OLD.size_bytes,
            OLD.mime_type, OLD.uploaded_by) THEN
            RAISE EXCEPTION 'file revision % is immutable', OLD.id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'file_revisions_append_only';
        END IF;
        RETURN NEW;
    END IF;
    -- DELETE: only together with the document (the cascade runs after the document is gone).
    IF EXISTS (SELECT 1 FROM documents WHERE id = OLD.document_id) THEN
        RAISE EXCEPTION 'file revision % can only be deleted with its document', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'file_revisions_append_only';
    END IF;
    RETURN OLD;
END
"""

# Folders: no cycles, at most MAX_FOLDER_DEPTH levels. Tree changes of one tenant serialise on
# an advisory lock: two concurrent moves could each pass the check alone and form a cycle.
FOLDER_GUARD = f"""
DECLARE
    cycle boolean;
    parent_depth integer;
    subtree_height integer := 1;
BEGIN
    IF NEW.parent_id IS NULL
       OR (TG_OP = 'UPDATE' AND NEW.parent_id IS NOT DISTINCT FROM OLD.parent_id) THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('dms.folders:' || TG_TABLE_SCHEMA, 0));
    WITH RECURSIVE ancestors(id, parent_id, depth) AS (
        SELECT f.id, f.parent_id, 1 FROM folders f WHERE f.id = NEW.parent_id
        UNION ALL
        SELECT f.id, f.parent_id, a.depth + 1
          FROM folders f JOIN ancestors a ON f.id = a.parent_id
         WHERE a.depth <= {MAX_FOLDER_DEPTH}
    )
    SELECT coalesce(bool_or(id = NEW.id), false), max(depth) INTO cycle, parent_depth
      FROM ancestors;
    IF cycle THEN
        RAISE EXCEPTION 'folder % cannot move under its own descendant %', NEW.id, NEW.parent_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'folders_no_cycle';
    END IF;
    IF parent_depth IS NULL THEN
        RETURN NEW;  -- unknown parent: the foreign key reports it
    END IF;
    IF TG_OP = 'UPDATE' THEN
        WITH RECURSIVE subtree(id, level) AS (
            SELECT NEW.id, 1
            UNION ALL
            SELECT f.id, s.level + 1 FROM folders f JOIN subtree s ON f.parent_id = s.id
             WHERE s.level <= {MAX_FOLDER_DEPTH}
        )
        SELECT max(level) INTO subtree_height FROM subtree;
    END IF;
    IF parent_depth + subtree_height > {MAX_FOLDER_DEPTH} THEN
        RAISE EXCEPTION 'folder % would be % levels deep; the limit is {MAX_FOLDER_DEPTH}',
            NEW.id, parent_depth + subtree_height
            USING ERRCODE = 'check_violation', CONSTRAINT = 'folders_max_depth';
    END IF;
    RETURN NEW;
END
"""


def _create_trigger_function(schema: str, name: str, body: str) -> None:
    execute_ddl(
        op.get_bind(),
        sql.SQL(
            "CREATE FUNCTION {}.{}() RETURNS trigger LANGUAGE plpgsql "
            "SET search_path = {}, pg_temp AS {}"
        ).format(
            sql.Identifier(schema), sql.Identifier(name), sql.Identifier(schema), sql.Literal(body)
        ),
    )


def _create_revision_guard(schema: str) -> None:
    _create_trigger_function(schema, "file_revisions_guard", REVISION_GUARD)
    execute_ddl(
        op.get_bind(),
        sql.SQL(
            "CREATE TRIGGER file_revisions_guard BEFORE INSERT OR UPDATE OR DELETE ON {}.{} "
            "FOR EACH ROW EXECUTE FUNCTION {}.{}()"
        ).format(
            sql.Identifier(schema),
            sql.Identifier("file_revisions"),
            sql.Identifier(schema),
            sql.Identifier("file_revisions_guard"),
        ),
    )


def _create_folder_guard(schema: str) -> None:
    _create_trigger_function(schema, "folders_guard", FOLDER_GUARD)
    execute_ddl(
        op.get_bind(),
        sql.SQL(
            "CREATE TRIGGER folders_guard BEFORE INSERT OR UPDATE OF parent_id ON {}.{} "
            "FOR EACH ROW EXECUTE FUNCTION {}.{}()"
        ).format(
            sql.Identifier(schema),
            sql.Identifier("folders"),
            sql.Identifier(schema),
            sql.Identifier("folders_guard"),
        ),
    )


def _downgrade_tenant(schema: str) -> None:
    op.drop_constraint("fk_documents_current_revision", "documents", schema=schema)
    for table in (
        "document_metadata_choices",
        "document_metadata",
        "metadata_field_options",
        "metadata_fields",
        "document_tags",
        "tags",
        "file_revisions",
        "documents",
        "folders",
    ):
        op.drop_table(table, schema=schema)
    for function in ("file_revisions_guard", "folders_guard"):
        execute_ddl(
            op.get_bind(),
            sql.SQL("DROP FUNCTION {}.{}()").format(
                sql.Identifier(schema), sql.Identifier(function)
            ),
        )
