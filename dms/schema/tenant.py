"""Tables of one tenant's schema.

Declared with ``schema=None`` and routed to ``tenant_<slug>`` by ``schema_translate_map``
(see :mod:`dms.tenancy`). The IAM's ``users`` table is declared under :data:`USERS_SCHEMA`, a
placeholder that routing maps to the configured users schema.

Every invariant of the domain is enforced here, by the database, so that no code path (ours,
a migration, a hand-written ``psql`` session) can break it:

* revisions are numbered 1, 2, 3 ... per document without gaps and are append-only
  (trigger ``file_revisions_guard``); a document's current revision is one of its own
  (composite foreign key);
* folder names are unique among siblings, top level included, ignoring case and deleted rows;
  the folder tree has no cycles and at most :data:`MAX_FOLDER_DEPTH` levels (trigger
  ``folders_guard``); each trigger-enforced rule refuses with its own SQLSTATE
  (:data:`GUARD_SQLSTATES`);
* a metadata value fills exactly the column of its field's type (CHECK over a copy of the type
  that a composite foreign key keeps equal to the field's);
* a content-addressed blob's key ends with its own SHA-256, and revisions may share a storage
  key (identical bytes are stored once: :mod:`dms.blobs`);
* a row names only a user who exists (``created_by``, ``uploaded_by``, ``imported_by``), and a
  user whom a row names cannot be deleted: the columns refer to ``known_users``, filled by
  trigger ``known_users_enlist``, which refers to ``users``;
* an imported file or folder is recorded once per source name and target folder
  (``import_provenance``), which is what makes an interrupted import resumable;
* ``document_search`` indexes exactly what it claims to: triggers rewrite a document's rows in
  the transaction that changes its title, tags, text values, current revision or that
  revision's extracted text (migration 0009; :mod:`dms.repositories.search`), and the folders
  and tags its ``filters`` name when a document or folder moves or a tag link changes
  (migration 0010).
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR

from dms.domain.model import FieldType
from dms.domain.validation import (
    FIELD_NAME_MAX_CHARS,
    FOLDER_NAME_MAX_CHARS,
    GROUP_NAME_MAX_CHARS,
    OPTION_MAX_CHARS,
    TAG_NAME_MAX_CHARS,
    TITLE_MAX_CHARS,
)
from dms.schema.naming import NAMING_CONVENTION

#: Placeholder schema of the IAM ``users`` table; routing maps it to the configured schema.
USERS_SCHEMA = "public"

#: Deepest folder level; the root level is 1.
MAX_FOLDER_DEPTH = 32

#: The SQLSTATE with which each trigger-enforced rule refuses a change (integrity class 23,
#: implementation-defined subclass M). The triggers also name the rule as the error's
#: constraint, but only a plain server reports that: a Citus coordinator passes on the SQLSTATE
#: of a worker's error and drops its constraint name (migration 0006).
GUARD_SQLSTATES = {
    "file_revisions_gap_free": "23M01",
    "file_revisions_append_only": "23M02",
    "folders_no_cycle": "23M03",
    "folders_max_depth": "23M04",
    "audit_events_append_only": "23M05",
}

#: The column that holds a value of each field type, keyed by :class:`FieldType` value
#: (multi-select values are link rows). The field types themselves are :class:`FieldType`'s.
VALUE_COLUMNS = {
    FieldType.STRING.value: "value_string",
    FieldType.TEXT.value: "value_text",
    FieldType.INT.value: "value_int",
    FieldType.DECIMAL.value: "value_decimal",
    FieldType.DATE.value: "value_date",
    FieldType.BOOL.value: "value_bool",
    FieldType.URL.value: "value_url",
    FieldType.SELECT.value: "option_id",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


def _id() -> sa.Column[object]:
    return sa.Column("id", sa.Uuid, primary_key=True, server_default=sa.func.gen_random_uuid())


#: The options of every GIN index (migration 0033). Without a pending list: new entries go
#: into the index's tree as they are written, not into a list that every scan reads whole until
#: a vacuum merges it, which the planner prices as such and so reads every row instead
#: (docs/search.md, "Plans"). Writes cost a little more (bench/results/search.md).
GIN_OPTIONS = {"fastupdate": "off"}


def _user_fk(name: str) -> sa.Column[object]:
    """A column that names the user who made the row: a key to :data:`known_users`.

    Trigger ``known_users_enlist`` adds the user there before the row is written. ``NULL``
    when a system principal made it (migration 0031): the audit trail names which.
    """
    return sa.Column(name, sa.Uuid, sa.ForeignKey("known_users.id", ondelete="RESTRICT"))


def _created_at() -> sa.Column[object]:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    )


def _updated_at() -> sa.Column[object]:
    return sa.Column(
        "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    )


def _deleted_at() -> sa.Column[object]:
    return sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True)


#: The root's access scope and the principal "everyone" (migration 0016, docs/access.md).
NIL_ID = "00000000-0000-0000-0000-000000000000"


def _access_columns() -> tuple[sa.Column[object], ...]:
    """Who owns a folder or document, and the access scope it falls under (kept by triggers)."""
    return (
        sa.Column("owner_id", sa.Uuid, sa.ForeignKey("known_users.id", ondelete="SET NULL")),
        sa.Column(
            "access_scope",
            sa.Uuid,
            nullable=False,
            server_default=sa.text(f"'{NIL_ID}'::uuid"),
        ),
    )


#: The IAM service's table, declared only so that foreign keys can name it; never created here.
users = sa.Table("users", metadata, sa.Column("id", sa.Uuid, primary_key=True), schema=USERS_SCHEMA)

#: The users this tenant's rows name, with the tenant's only foreign key to ``users``: one key
#: per tenant instead of one per column puts two triggers on ``users`` per tenant instead of
#: twelve (migration 0008 says what they cost). A user's deletion cascades here and is refused
#: while a row of the tenant still names them.
known_users = sa.Table(
    "known_users",
    metadata,
    sa.Column("id", sa.Uuid, sa.ForeignKey(users.c.id, ondelete="CASCADE"), primary_key=True),
)

folders = sa.Table(
    "folders",
    metadata,
    _id(),
    sa.Column("parent_id", sa.Uuid, sa.ForeignKey("folders.id", ondelete="RESTRICT")),
    sa.Column("name", sa.Text, nullable=False),
    _user_fk("created_by"),
    _created_at(),
    _updated_at(),
    _deleted_at(),
    *_access_columns(),
    sa.Column("inherits", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.CheckConstraint(
        f"btrim(name) <> '' AND strpos(name, '/') = 0 AND length(name) <= {FOLDER_NAME_MAX_CHARS}",
        name="name_valid",
    ),
    sa.CheckConstraint("parent_id <> id", name="not_own_parent"),
)
sa.Index("ix_folders_parent_id", folders.c.parent_id)
sa.Index("ix_folders_created_by", folders.c.created_by)
sa.Index("ix_folders_owner_id", folders.c.owner_id)
sa.Index("ix_folders_access_scope", folders.c.access_scope)
sa.Index(
    "uq_folders_sibling_name",
    folders.c.parent_id,
    sa.func.lower(folders.c.name),
    unique=True,
    postgresql_where=folders.c.deleted_at.is_(None),
    postgresql_nulls_not_distinct=True,
)

documents = sa.Table(
    "documents",
    metadata,
    _id(),
    sa.Column("folder_id", sa.Uuid, sa.ForeignKey("folders.id", ondelete="RESTRICT")),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("current_revision_id", sa.Uuid),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    _user_fk("created_by"),
    _created_at(),
    _updated_at(),
    _deleted_at(),
    *_access_columns(),
    sa.CheckConstraint(
        f"btrim(title) <> '' AND length(title) <= {TITLE_MAX_CHARS}", name="title_valid"
    ),
    sa.CheckConstraint("version >= 1", name="version_positive"),
    # A document's current revision must be one of its own revisions. Deferrable, yet checked
    # at each statement's end unless a transaction defers it: an import's batch inserts
    # documents already pointing at the revisions that it inserts next, and is the only one
    # that defers it (dms.repositories.imports).
    sa.ForeignKeyConstraint(
        ["id", "current_revision_id"],
        ["file_revisions.document_id", "file_revisions.id"],
        name="fk_documents_current_revision",
        use_alter=True,
        deferrable=True,
        initially="IMMEDIATE",
    ),
)
sa.Index("ix_documents_folder_id", documents.c.folder_id)
sa.Index("ix_documents_created_by", documents.c.created_by)
sa.Index("ix_documents_owner_id", documents.c.owner_id)
sa.Index("ix_documents_access_scope", documents.c.access_scope)
sa.Index("ix_documents_current_revision_id", documents.c.current_revision_id)
# The trash, read backwards for newest first (migration 0011): the few deleted documents, not
# the many live ones.
sa.Index(
    "ix_documents_trash",
    documents.c.deleted_at,
    documents.c.id,
    postgresql_where=documents.c.deleted_at.is_not(None),
)
sa.Index(
    "uq_documents_folder_title",
    documents.c.folder_id,
    sa.func.lower(documents.c.title),
    unique=True,
    postgresql_where=documents.c.deleted_at.is_(None),
    postgresql_nulls_not_distinct=True,
)

# ILIKE '%...%' on titles (DocumentQuery.title_contains) reads this trigram index instead of
# scanning every document (pg_trgm, created by migration 0009).
sa.Index(
    "ix_documents_title_trgm",
    documents.c.title,
    postgresql_using="gin",
    postgresql_ops={"title": "gin_trgm_ops"},
    postgresql_with=GIN_OPTIONS,
)

file_revisions = sa.Table(
    "file_revisions",
    metadata,
    _id(),
    sa.Column(
        "document_id",
        sa.Uuid,
        sa.ForeignKey("documents.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("revision_no", sa.Integer, nullable=False),
    sa.Column("storage_key", sa.Text, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("mime_type", sa.Text, nullable=False),
    _user_fk("uploaded_by"),
    _created_at(),
    sa.UniqueConstraint("document_id", "revision_no"),
    sa.UniqueConstraint("document_id", "id"),
    sa.CheckConstraint("revision_no >= 1", name="revision_no_positive"),
    sa.CheckConstraint("size_bytes >= 0", name="size_not_negative"),
    sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_hex"),
    sa.CheckConstraint("btrim(storage_key) <> ''", name="storage_key_not_blank"),
    sa.CheckConstraint(
        "mime_type ~ '^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*'", name="mime_type_valid"
    ),
)
sa.Index("ix_file_revisions_sha256", file_revisions.c.sha256)
sa.Index("ix_file_revisions_uploaded_by", file_revisions.c.uploaded_by)
# Not unique: revisions with identical bytes share one content-addressed blob (migration
# 0004). The index answers "is this blob still referenced?".
sa.Index("ix_file_revisions_storage_key", file_revisions.c.storage_key)

#: Content-addressed blobs of the tenant: one row per distinct content that some revision
#: referenced. The row is what writers lock (``dms.blobs``): a blob is deleted only by a
#: transaction that holds its row and sees no revision using it.
blobs = sa.Table(
    "blobs",
    metadata,
    sa.Column("storage_key", sa.Text, primary_key=True),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    _created_at(),
    sa.Column(
        "claimed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
    sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_hex"),
    sa.CheckConstraint("size_bytes >= 0", name="size_not_negative"),
    sa.CheckConstraint("right(storage_key, 65) = '/' || sha256", name="key_is_content_address"),
)

#: Where imported folders and documents came from: the raw bytes of the source name (file
#: names need not be UTF-8), the target folder, and for documents the SHA-256 last imported.
import_provenance = sa.Table(
    "import_provenance",
    metadata,
    _id(),
    sa.Column("parent_id", sa.Uuid, sa.ForeignKey("folders.id", ondelete="CASCADE")),
    sa.Column("source_name", sa.LargeBinary, nullable=False),
    sa.Column("source_path", sa.LargeBinary, nullable=False),
    sa.Column("folder_id", sa.Uuid, sa.ForeignKey("folders.id", ondelete="CASCADE")),
    sa.Column("document_id", sa.Uuid, sa.ForeignKey("documents.id", ondelete="CASCADE")),
    sa.Column("sha256", sa.Text),
    _user_fk("imported_by"),
    _created_at(),
    _updated_at(),
    sa.CheckConstraint("num_nonnulls(folder_id, document_id) = 1", name="one_entry"),
    sa.CheckConstraint("(document_id IS NULL) = (sha256 IS NULL)", name="documents_have_sha256"),
    sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="sha256_hex"),
    sa.CheckConstraint("octet_length(source_name) BETWEEN 1 AND 1024", name="source_name_valid"),
)
sa.Index(
    "uq_import_provenance_source",
    import_provenance.c.parent_id,
    import_provenance.c.source_name,
    unique=True,
    postgresql_nulls_not_distinct=True,
)
sa.Index("uq_import_provenance_folder_id", import_provenance.c.folder_id, unique=True)
sa.Index("uq_import_provenance_document_id", import_provenance.c.document_id, unique=True)
sa.Index("ix_import_provenance_imported_by", import_provenance.c.imported_by)

tags = sa.Table(
    "tags",
    metadata,
    _id(),
    sa.Column("name", sa.Text, nullable=False),
    _user_fk("created_by"),
    _created_at(),
    _updated_at(),
    sa.CheckConstraint(
        f"btrim(name) <> '' AND length(name) <= {TAG_NAME_MAX_CHARS}", name="name_valid"
    ),
)
sa.Index("uq_tags_name", sa.func.lower(tags.c.name), unique=True)
sa.Index("ix_tags_created_by", tags.c.created_by)

document_tags = sa.Table(
    "document_tags",
    metadata,
    sa.Column(
        "document_id",
        sa.Uuid,
        sa.ForeignKey("documents.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("tag_id", sa.Uuid, sa.ForeignKey("tags.id", ondelete="CASCADE"), primary_key=True),
    _created_at(),
)
# Leads with tag_id (the foreign key's index); with document_id too, "documents having these
# tags" reads the links by index alone (migration 0003).
sa.Index("ix_document_tags_tag_id_document_id", document_tags.c.tag_id, document_tags.c.document_id)


def _sql_list(kinds: Iterable[FieldType]) -> str:
    # Enum values are fixed identifiers of ours, never caller text.
    return ", ".join(f"'{kind.value}'" for kind in kinds)


_MULTI_SELECT = FieldType.MULTI_SELECT.value


metadata_fields = sa.Table(
    "metadata_fields",
    metadata,
    _id(),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("field_type", sa.Text, nullable=False),
    sa.Column("required", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("default_value", JSONB),
    _user_fk("created_by"),
    _created_at(),
    _updated_at(),
    sa.UniqueConstraint("id", "field_type"),
    sa.CheckConstraint(
        f"btrim(name) <> '' AND length(name) <= {FIELD_NAME_MAX_CHARS}", name="name_valid"
    ),
    sa.CheckConstraint(f"field_type IN ({_sql_list(FieldType)})", name="field_type_known"),
)
sa.Index("uq_metadata_fields_name", sa.func.lower(metadata_fields.c.name), unique=True)
sa.Index("ix_metadata_fields_created_by", metadata_fields.c.created_by)

metadata_field_options = sa.Table(
    "metadata_field_options",
    metadata,
    _id(),
    sa.Column("field_id", sa.Uuid, nullable=False),
    # A copy of the field's type, kept equal by the foreign key, so that only
    # select fields can have options.
    sa.Column("field_type", sa.Text, nullable=False),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("position", sa.Integer, nullable=False, server_default="0"),
    sa.Column("retired_at", sa.DateTime(timezone=True)),
    _created_at(),
    sa.ForeignKeyConstraint(
        ["field_id", "field_type"],
        ["metadata_fields.id", "metadata_fields.field_type"],
        name="fk_metadata_field_options_field",
        ondelete="CASCADE",
    ),
    sa.UniqueConstraint("field_id", "id"),
    sa.CheckConstraint(
        f"field_type IN ({_sql_list(kind for kind in FieldType if kind.has_options)})",
        name="field_has_options",
    ),
    sa.CheckConstraint(
        f"btrim(value) <> '' AND length(value) <= {OPTION_MAX_CHARS}", name="value_valid"
    ),
)
sa.Index(
    "uq_metadata_field_options_value",
    metadata_field_options.c.field_id,
    sa.func.lower(metadata_field_options.c.value),
    unique=True,
)

_value_columns = ", ".join(VALUE_COLUMNS.values())
_value_cases = " ".join(
    f"WHEN '{field_type}' THEN {column} IS NOT NULL" for field_type, column in VALUE_COLUMNS.items()
)

document_metadata = sa.Table(
    "document_metadata",
    metadata,
    sa.Column(
        "document_id",
        sa.Uuid,
        sa.ForeignKey("documents.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("field_id", sa.Uuid, primary_key=True),
    sa.Column("field_type", sa.Text, nullable=False),
    sa.Column("value_string", sa.Text),
    sa.Column("value_text", sa.Text),
    sa.Column("value_int", sa.BigInteger),
    sa.Column("value_decimal", sa.Numeric),
    sa.Column("value_date", sa.Date),
    sa.Column("value_bool", sa.Boolean),
    sa.Column("value_url", sa.Text),
    sa.Column("option_id", sa.Uuid),
    _created_at(),
    _updated_at(),
    sa.ForeignKeyConstraint(
        ["field_id", "field_type"],
        ["metadata_fields.id", "metadata_fields.field_type"],
        name="fk_document_metadata_field",
        ondelete="CASCADE",
    ),
    sa.ForeignKeyConstraint(
        ["field_id", "option_id"],
        ["metadata_field_options.field_id", "metadata_field_options.id"],
        name="fk_document_metadata_option",
        ondelete="RESTRICT",
    ),
    sa.UniqueConstraint("document_id", "field_id", "field_type"),
    # Exactly the column of the field's type is filled; multi-select values are link rows.
    sa.CheckConstraint(
        f"num_nonnulls({_value_columns}) = (field_type <> '{_MULTI_SELECT}')::int "
        f"AND CASE field_type {_value_cases} ELSE true END",
        name="value_matches_type",
    ),
    sa.CheckConstraint("value_url ~ '^https?://[^[:space:]]+$'", name="url_valid"),
)
sa.Index(
    "ix_document_metadata_field_option", document_metadata.c.field_id, document_metadata.c.option_id
)
for _column in ("value_string", "value_int", "value_decimal", "value_date"):
    sa.Index(
        f"ix_document_metadata_field_{_column}",
        document_metadata.c.field_id,
        document_metadata.c[_column],
    )

document_metadata_choices = sa.Table(
    "document_metadata_choices",
    metadata,
    sa.Column("document_id", sa.Uuid, primary_key=True),
    sa.Column("field_id", sa.Uuid, primary_key=True),
    sa.Column("option_id", sa.Uuid, primary_key=True),
    sa.Column("field_type", sa.Text, nullable=False, server_default=_MULTI_SELECT),
    sa.ForeignKeyConstraint(
        ["document_id", "field_id", "field_type"],
        [
            "document_metadata.document_id",
            "document_metadata.field_id",
            "document_metadata.field_type",
        ],
        name="fk_document_metadata_choices_value",
        ondelete="CASCADE",
    ),
    sa.ForeignKeyConstraint(
        ["field_id", "option_id"],
        ["metadata_field_options.field_id", "metadata_field_options.id"],
        name="fk_document_metadata_choices_option",
        ondelete="RESTRICT",
    ),
    sa.CheckConstraint(f"field_type = '{_MULTI_SELECT}'", name="multi_select_only"),
)
sa.Index(
    "ix_document_metadata_choices_field_option",
    document_metadata_choices.c.field_id,
    document_metadata_choices.c.option_id,
)

#: Longest part of a revision's text, in characters: every word of a part gets its own position
#: in the index (PostgreSQL keeps positions up to 16,383, and no parser token is shorter than a
#: character) and a part's ``tsvector`` stays far below PostgreSQL's 1 MB.
TEXT_PART_MAX_CHARS = 16000

#: The tenant's search settings: one row.
search_settings = sa.Table(
    "search_settings",
    metadata,
    sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.true()),
    sa.Column("text_search_config", sa.Text, nullable=False, server_default="simple"),
    sa.CheckConstraint("singleton", name="one_row"),
    sa.CheckConstraint("text_search_config ~ '^[a-z][a-z0-9_]{0,62}$'", name="config_name"),
)

#: That a revision's text was extracted, and by what; its text is in ``revision_text_parts``
#: (no part when the revision has no text), written before this row, whose insert (trigger
#: ``search_text_extracted``) rebuilds the index rows of the document it is current for.
revision_texts = sa.Table(
    "revision_texts",
    metadata,
    sa.Column(
        "revision_id",
        sa.Uuid,
        sa.ForeignKey("file_revisions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("extractor", sa.Text, nullable=False),
    sa.Column("parts", sa.Integer, nullable=False),
    sa.Column("chars", sa.BigInteger, nullable=False),
    sa.Column(
        "extracted_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
    sa.CheckConstraint("parts >= 0", name="parts_not_negative"),
    sa.CheckConstraint("chars >= 0", name="chars_not_negative"),
    sa.CheckConstraint("btrim(extractor) <> ''", name="extractor_named"),
)

revision_text_parts = sa.Table(
    "revision_text_parts",
    metadata,
    sa.Column(
        "revision_id",
        sa.Uuid,
        sa.ForeignKey("file_revisions.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("part_no", sa.Integer, primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
    sa.CheckConstraint("part_no >= 1", name="part_no_positive"),
    sa.CheckConstraint(f"length(body) <= {TEXT_PART_MAX_CHARS}", name="body_fits_index"),
)

#: The full-text index: per document and part of its current revision's text, that part's
#: terms (weight D) followed by the title (A), tag names and text values (B). ``config`` is
#: the text search configuration the row was built with. Written by triggers only.
document_search = sa.Table(
    "document_search",
    metadata,
    sa.Column(
        "document_id",
        sa.Uuid,
        sa.ForeignKey("documents.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("part_no", sa.Integer, primary_key=True),
    sa.Column("config", sa.Text, nullable=False),
    sa.Column("terms", TSVECTOR, nullable=False),
    # The document's folder, the folders above it and its tags (migration 0010), so that the
    # index answers a search's folder and tag filters together with its words.
    sa.Column("filters", ARRAY(sa.Uuid), nullable=False),
    # The document's scope and owner (migration 0021), so that a search passes over the rows
    # its actor may not view without reading their documents.
    # (Nullable only so that a row of a missing document is refused by its foreign key.)
    sa.Column("access_scope", sa.Uuid),
    sa.Column("owner_id", sa.Uuid),
)
sa.Index(
    "ix_document_search_terms_filters",
    document_search.c.terms,
    document_search.c.filters,
    postgresql_using="gin",
    postgresql_with=GIN_OPTIONS,
)
# The words of the documents that are their own scope (migration 0021), which a search for a
# user who may view few documents reads apart from the rest.
sa.Index(
    "ix_document_search_own_scope",
    document_search.c.terms,
    postgresql_using="gin",
    postgresql_where=document_search.c.access_scope == document_search.c.document_id,
    postgresql_with=GIN_OPTIONS,
)

#: The audit trail (migration 0013, docs/audit.md): one row per change, written by triggers in
#: the changing transaction and stamped there with its actor (``dms.actor``), role, transaction,
#: time and context; append-only (trigger ``audit_guard``); ``seq`` and ``hash`` place it in the
#: tenant's hash chain once it is sealed (:func:`dms.audit.seal_audit_trail`).
audit_events = sa.Table(
    "audit_events",
    metadata,
    _id(),
    sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("txid", sa.BigInteger, nullable=False),
    sa.Column("actor_id", sa.Uuid),
    sa.Column("actor_system", sa.Text),
    sa.Column("db_role", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("object_type", sa.Text, nullable=False),
    sa.Column("object_id", sa.Uuid),
    sa.Column("document_id", sa.Uuid),
    sa.Column("before", JSONB),
    sa.Column("after", JSONB),
    sa.Column("context", JSONB),
    sa.Column("seq", sa.BigInteger, unique=True),
    sa.Column("hash", sa.LargeBinary),
    sa.Column("sealed_at", sa.DateTime(timezone=True)),
    sa.CheckConstraint("(seq IS NULL) = (hash IS NULL)", name="sealed_whole"),
    sa.CheckConstraint("num_nonnulls(actor_id, actor_system) <= 1", name="one_actor"),
)
sa.Index("ix_audit_events_occurred_at_id", audit_events.c.occurred_at, audit_events.c.id)
sa.Index(
    "ix_audit_events_document_id_occurred_at_id",
    audit_events.c.document_id,
    audit_events.c.occurred_at,
    audit_events.c.id,
    postgresql_where=audit_events.c.document_id.is_not(None),
)
# What the sealer reads: the few events not yet in the chain.
sa.Index(
    "ix_audit_events_unsealed",
    audit_events.c.occurred_at,
    audit_events.c.id,
    postgresql_where=audit_events.c.seq.is_(None),
)

#: The hash of the audit chain before its first event.
AUDIT_GENESIS = bytes(32)

#: The head of the tenant's audit chain: one row, from the tenant's creation on. Sealers lock
#: it; writers never touch it.
audit_chain = sa.Table(
    "audit_chain",
    metadata,
    sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.true()),
    sa.Column("last_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column(
        "last_hash",
        sa.LargeBinary,
        nullable=False,
        server_default=sa.text("decode(repeat('00', 32), 'hex')"),
    ),
    sa.Column("sealed_at", sa.DateTime(timezone=True)),
    sa.CheckConstraint("singleton", name="one_row"),
    sa.CheckConstraint("last_seq >= 0", name="seq_not_negative"),
)

#: Where pruning cut the chain: the position and hash of the last event it removed, and how
#: many it removed. Append-only, like the events.
audit_checkpoints = sa.Table(
    "audit_checkpoints",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("hash", sa.LargeBinary, nullable=False),
    sa.Column("pruned", sa.BigInteger, nullable=False),
    _created_at(),
    sa.CheckConstraint("seq >= 1", name="seq_positive"),
)

#: The tenant's audit settings: at most one row (none: the defaults).
audit_settings = sa.Table(
    "audit_settings",
    metadata,
    sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.true()),
    sa.Column("record_reads", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.CheckConstraint("singleton", name="one_row"),
)

#: Access control (migration 0016, docs/access.md). The tenant's groups of users.
access_groups = sa.Table(
    "access_groups",
    metadata,
    _id(),
    sa.Column("name", sa.Text, nullable=False),
    _created_at(),
    sa.CheckConstraint(
        f"btrim(name) <> '' AND length(name) <= {GROUP_NAME_MAX_CHARS}", name="name_valid"
    ),
)
sa.Index("uq_access_groups_name", sa.func.lower(access_groups.c.name), unique=True)

access_group_members = sa.Table(
    "access_group_members",
    metadata,
    sa.Column(
        "group_id",
        sa.Uuid,
        sa.ForeignKey("access_groups.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column(
        "user_id", sa.Uuid, sa.ForeignKey("known_users.id", ondelete="CASCADE"), primary_key=True
    ),
)
sa.Index("ix_access_group_members_user_id", access_group_members.c.user_id)

#: What is granted: ``rights`` (view 1, edit 2, delete 4, manage 8) to a user, a group or
#: everyone (neither) on a folder, a document or the root (neither).
access_entries = sa.Table(
    "access_entries",
    metadata,
    _id(),
    sa.Column("folder_id", sa.Uuid, sa.ForeignKey("folders.id", ondelete="CASCADE")),
    sa.Column("document_id", sa.Uuid, sa.ForeignKey("documents.id", ondelete="CASCADE")),
    sa.Column("user_id", sa.Uuid, sa.ForeignKey("known_users.id", ondelete="CASCADE")),
    sa.Column("group_id", sa.Uuid, sa.ForeignKey("access_groups.id", ondelete="CASCADE")),
    sa.Column("rights", sa.SmallInteger, nullable=False),
    _created_at(),
    sa.CheckConstraint("num_nonnulls(folder_id, document_id) <= 1", name="one_object"),
    sa.CheckConstraint("num_nonnulls(user_id, group_id) <= 1", name="one_principal"),
    sa.CheckConstraint(
        "rights & 1 = 1 AND rights BETWEEN 1 AND 15 AND (rights & 8 = 0 OR rights = 15)",
        name="rights_valid",
    ),
)
sa.Index(
    "uq_access_entries_object_principal",
    access_entries.c.folder_id,
    access_entries.c.document_id,
    access_entries.c.user_id,
    access_entries.c.group_id,
    unique=True,
    postgresql_nulls_not_distinct=True,
)
sa.Index("ix_access_entries_document_id", access_entries.c.document_id)
sa.Index("ix_access_entries_user_id", access_entries.c.user_id)
sa.Index("ix_access_entries_group_id", access_entries.c.group_id)

#: Derived, written by triggers only: the root, each folder with entries or that stops
#: inheriting, each document with entries; with the scope each inherits from.
access_scopes = sa.Table(
    "access_scopes",
    metadata,
    sa.Column("id", sa.Uuid, primary_key=True),
    sa.Column("parent_id", sa.Uuid, sa.ForeignKey("access_scopes.id", ondelete="RESTRICT")),
    sa.Column("inherits", sa.Boolean, nullable=False),
)
sa.Index("ix_access_scopes_parent_id", access_scopes.c.parent_id)

#: Derived, written by triggers only: each scope's effective rights per principal.
access_grants = sa.Table(
    "access_grants",
    metadata,
    sa.Column(
        "scope_id",
        sa.Uuid,
        sa.ForeignKey("access_scopes.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("principal_id", sa.Uuid, primary_key=True),
    sa.Column("rights", sa.SmallInteger, nullable=False),
    # The scope is a document's (revision 0019): a statement reads the set of the actor's
    # other scopes, and probes a document's own by primary key.
    sa.Column("on_document", sa.Boolean, server_default=sa.false(), nullable=False),
)
sa.Index(
    "ix_access_grants_principal_id",
    access_grants.c.principal_id,
    access_grants.c.on_document,
    access_grants.c.scope_id,
    access_grants.c.rights,
)
