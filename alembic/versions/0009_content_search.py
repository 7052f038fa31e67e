"""Content search: extracted text of revisions and a full-text index of documents per tenant.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05

Shared part: the contrib extensions ``unaccent`` (accent folding of indexed and searched text)
and ``pg_trgm`` (the trigram index behind ``DocumentQuery.title_contains``), created where the
database creates extensions by default unless they exist already. An extension this revision
created carries a comment saying so, and only such an extension is dropped by the downgrade:
one that the database had before stays as it was.

Tenant part:

* ``search_settings``: at most one row, the tenant's text search configuration (none:
  ``simple``; ``dms search config`` changes it and reindexes);
* ``revision_text_parts`` and ``revision_texts``: the text extracted from a revision (job
  ``revision.extract``), split into parts short enough that PostgreSQL indexes every word of
  each (:mod:`dms.extraction` says why), and the row that says the revision was extracted
  (written after its parts; also when it had no text at all, which is what makes the backfill
  resumable);
* ``document_search``: per document and part of its current revision's text, the ``tsvector``
  of that part (weight D) followed by the document's title (A) and its tag names and text
  metadata values (B), with a GIN index. Written by triggers in the transaction that changes
  any of them, raw SQL included, so it never drifts from what it indexes: a new current
  revision or newly extracted text rebuilds a document's rows (``search_rebuild``), a title,
  tag or value change rewrites only the weighted header of each row (``search_refresh_header``,
  which keeps the content's lexemes with ``ts_filter`` and never parses the text again).

Existing documents are indexed by the upgrade (title, tags and values: no revision has text
yet; ``dms search backfill`` enqueues their extraction). The downgrade drops all of it.
"""

from __future__ import annotations

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects.postgresql import TSVECTOR

from alembic import op
from dms.migrations import MigrationScope
from dms.migrations.steps import call_for_each_document
from dms.schema.ddl import create_functions, execute_ddl

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

EXTENSIONS = ("unaccent", "pg_trgm")
#: The comment that marks an extension this revision created (and its downgrade may drop).
CREATED_HERE = "created by dms revision 0009"

#: Text as it is indexed and searched: without accents (``unaccent``'s own dictionary, named
#: with its schema: the one-argument form would look it up on the caller's search path).
FOLD = "SELECT {unaccent}({dictionary}, body)"

#: The document's weighted header: title (A), tag names and text metadata values (B). At most
#: HEADER_VALUE_CHARS of values, so that a huge text value cannot push a tsvector past 1 MB.
HEADER = """
SELECT setweight(to_tsvector(cfg, search_fold(d.title)), 'A')
    || setweight(to_tsvector(cfg, search_fold(left(concat_ws(' ',
        (SELECT string_agg(t.name, ' ') FROM document_tags dt JOIN tags t ON t.id = dt.tag_id
          WHERE dt.document_id = doc),
        (SELECT string_agg(concat_ws(' ', m.value_string, m.value_text, m.value_url), ' ')
           FROM document_metadata m WHERE m.document_id = doc)), 100000))), 'B')
  FROM documents d WHERE d.id = doc
"""

#: Every row of a document again, from its current revision's parts (one row if none). One
#: statement per row rather than an INSERT ... SELECT over the document's tables: on Citus the
#: trigger runs on the tenant's node, where single-table statements are routed as they are.
REBUILD = """
DECLARE
    cfg_name text := coalesce((SELECT text_search_config FROM search_settings), 'simple');
    cfg regconfig := cfg_name::regconfig;
    revision uuid;
    header tsvector;
    part record;
    parts integer := 0;
BEGIN
    DELETE FROM document_search WHERE document_id = doc;
    SELECT current_revision_id INTO revision FROM documents WHERE id = doc;
    IF NOT FOUND THEN
        RETURN;  -- gone (purged in this statement)
    END IF;
    header := coalesce(search_header(doc, cfg), ''::tsvector);
    FOR part IN
        SELECT part_no, body FROM revision_text_parts WHERE revision_id = revision
    LOOP
        INSERT INTO document_search (document_id, part_no, config, terms)
        VALUES (doc, part.part_no, cfg_name,
                setweight(to_tsvector(cfg, search_fold(part.body)), 'D') || header);
        parts := parts + 1;
    END LOOP;
    IF parts = 0 THEN
        INSERT INTO document_search (document_id, part_no, config, terms)
        VALUES (doc, 1, cfg_name, header);
    END IF;
END
"""

#: The header of each row again, keeping its content lexemes (weight D) as they are. The content
#: comes first in a row, so its positions never move.
REFRESH_HEADER = """
DECLARE
    cfg_name text;
    header tsvector;
BEGIN
    -- A document's rows are always built together, with one configuration.
    SELECT config INTO cfg_name FROM document_search WHERE document_id = doc LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    header := coalesce(search_header(doc, cfg_name::regconfig), ''::tsvector);
    UPDATE document_search SET terms = ts_filter(terms, '{{d}}') || header
     WHERE document_id = doc;
END
"""

DOCUMENTS_CHANGED = """
BEGIN
    IF TG_OP = 'INSERT' OR NEW.current_revision_id IS DISTINCT FROM OLD.current_revision_id THEN
        PERFORM search_rebuild(NEW.id);
    ELSIF NEW.title IS DISTINCT FROM OLD.title THEN
        PERFORM search_refresh_header(NEW.id);
    END IF;
    RETURN NULL;
END
"""

LINKS_CHANGED = """
DECLARE
    indexed constant text[] := ARRAY['string', 'text', 'url'];
    old_document uuid;
    new_document uuid;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        old_document := OLD.document_id;
        -- Values of other types are not indexed: nothing to rewrite for them. (Nested: SQL
        -- does not promise to skip NEW.field_type, which document_tags lacks.)
        IF TG_TABLE_NAME = 'document_metadata' THEN
            IF NOT OLD.field_type = ANY (indexed) THEN
                old_document := NULL;
            END IF;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        new_document := NEW.document_id;
        IF TG_TABLE_NAME = 'document_metadata' THEN
            IF NOT NEW.field_type = ANY (indexed) THEN
                new_document := NULL;
            END IF;
        END IF;
    END IF;
    IF old_document IS NOT NULL THEN
        PERFORM search_refresh_header(old_document);
    END IF;
    IF new_document IS NOT NULL AND new_document IS DISTINCT FROM old_document THEN
        PERFORM search_refresh_header(new_document);
    END IF;
    RETURN NULL;
END
"""

TAG_RENAMED = """
DECLARE
    doc uuid;
BEGIN
    IF NEW.name IS DISTINCT FROM OLD.name THEN
        FOR doc IN SELECT document_id FROM document_tags WHERE tag_id = NEW.id LOOP
            PERFORM search_refresh_header(doc);
        END LOOP;
    END IF;
    RETURN NULL;
END
"""

TEXT_EXTRACTED = """
DECLARE
    revision uuid := CASE TG_OP WHEN 'DELETE' THEN OLD.revision_id ELSE NEW.revision_id END;
    doc uuid;
BEGIN
    FOR doc IN SELECT id FROM documents WHERE current_revision_id = revision LOOP
        PERFORM search_rebuild(doc);
    END LOOP;
    RETURN NULL;
END
"""

#: (trigger, table, events) of the triggers that keep ``document_search`` in step.
TRIGGERS = (
    ("search_documents_changed", "documents", "INSERT OR UPDATE OF title, current_revision_id"),
    ("search_links_changed", "document_tags", "INSERT OR UPDATE OR DELETE"),
    ("search_links_changed", "document_metadata", "INSERT OR UPDATE OR DELETE"),
    ("search_tag_renamed", "tags", "UPDATE OF name"),
    ("search_text_extracted", "revision_texts", "INSERT OR DELETE"),
)
_extension = sa.table(
    "pg_extension",
    sa.column("oid", sa.Integer),
    sa.column("extname", sa.Text),
    sa.column("extnamespace", sa.Integer),
    schema="pg_catalog",
)
_depend = sa.table(
    "pg_depend",
    sa.column("objid", sa.Integer),
    sa.column("refobjid", sa.Integer),
    sa.column("deptype", sa.Text),
    schema="pg_catalog",
)
_namespace = sa.table(
    "pg_namespace", sa.column("oid", sa.Integer), sa.column("nspname", sa.Text), schema="pg_catalog"
)

TRIGGER_FUNCTIONS = {
    "search_documents_changed": DOCUMENTS_CHANGED,
    "search_links_changed": LINKS_CHANGED,
    "search_tag_renamed": TAG_RENAMED,
    "search_text_extracted": TEXT_EXTRACTED,
}


def upgrade(*, scope: MigrationScope) -> None:
    # Both parts: a tenant can be created at head while the shared schema is behind.
    _create_extensions()
    if scope.is_tenant:
        _upgrade_tenant(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)
    else:
        _drop_extensions()


#: Creates an extension unless the database has it, marking it as created here. One statement
#: that decides on the server: a new tenant's recording (dms.migrations.template) replays it on
#: databases that may or may not have the extension.
ENSURE_EXTENSION = """
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = {name}) THEN
        CREATE EXTENSION {identifier};
        COMMENT ON EXTENSION {identifier} IS {comment};
    END IF;
END
"""


def _create_extensions() -> None:
    bind = op.get_bind()
    for name in EXTENSIONS:
        body = sql.SQL(ENSURE_EXTENSION).format(
            name=sql.Literal(name),
            identifier=sql.Identifier(name),
            comment=sql.Literal(CREATED_HERE),
        )
        execute_ddl(
            bind,
            sql.SQL("DO {}").format(sql.Literal(body.as_string(bind.connection.driver_connection))),
        )


def _drop_extensions() -> None:
    bind = op.get_bind()
    for name in EXTENSIONS:
        comment = bind.execute(
            sa.select(sa.func.pg_catalog.obj_description(_extension.c.oid, "pg_extension")).where(
                _extension.c.extname == name
            )
        ).scalar()
        if comment == CREATED_HERE and not _still_used(name):
            execute_ddl(bind, sql.SQL("DROP EXTENSION {}").format(sql.Identifier(name)))


def _still_used(name: str) -> bool:
    """Whether an object outside the extension depends on one of its members (a tenant's index
    on ``gin_trgm_ops`` when a tenant is still at this revision or above)."""
    member = sa.select(_depend.c.objid).where(
        _depend.c.refobjid
        == sa.select(_extension.c.oid).where(_extension.c.extname == name).scalar_subquery(),
        _depend.c.deptype == "e",
    )
    return bool(
        op.get_bind()
        .execute(
            sa.select(sa.exists().where(_depend.c.refobjid.in_(member), _depend.c.deptype == "n"))
        )
        .scalar()
    )


def _extension_schema(name: str) -> str | None:
    # Reads pg_catalog only: a tenant template's recording leaves such statements out.
    found = (
        op.get_bind()
        .execute(
            sa.select(_namespace.c.nspname)
            .join_from(_extension, _namespace, _namespace.c.oid == _extension.c.extnamespace)
            .where(_extension.c.extname == name)
        )
        .scalar()
    )
    return None if found is None else str(found)


def _required_schema(name: str) -> str:
    schema = _extension_schema(name)
    assert schema is not None, f"extension {name} was created by upgrade()"  # noqa: S101
    return schema


def _upgrade_tenant(schema: str) -> None:
    _create_tables(schema)
    op.create_index(
        "ix_documents_title_trgm",
        "documents",
        ["title"],
        schema=schema,
        postgresql_using="gin",
        postgresql_ops={"title": f"{_required_schema('pg_trgm')}.gin_trgm_ops"},
    )
    _create_functions(schema)
    for trigger, table, events in TRIGGERS:
        execute_ddl(
            op.get_bind(),
            sql.SQL(
                "CREATE TRIGGER {} AFTER {} ON {}.{} FOR EACH ROW EXECUTE FUNCTION {}.{}()"
            ).format(
                sql.Identifier(trigger),
                sql.SQL(events),
                sql.Identifier(schema),
                sql.Identifier(table),
                sql.Identifier(schema),
                sql.Identifier(trigger),
            ),
        )
    # Title, tags and values of existing documents: no text is extracted yet.
    call_for_each_document(op.get_bind(), schema, "search_rebuild")


def _create_tables(schema: str) -> None:
    op.create_table(
        "search_settings",
        sa.Column("singleton", sa.Boolean, server_default=sa.true(), nullable=False),
        sa.Column("text_search_config", sa.Text, server_default="simple", nullable=False),
        sa.PrimaryKeyConstraint("singleton", name="pk_search_settings"),
        sa.CheckConstraint("singleton", name="ck_search_settings_one_row"),
        sa.CheckConstraint(
            "text_search_config ~ '^[a-z][a-z0-9_]{0,62}$'",
            name="ck_search_settings_config_name",
        ),
        schema=schema,
    )
    op.create_table(
        "revision_texts",
        sa.Column("revision_id", sa.Uuid, nullable=False),
        sa.Column("extractor", sa.Text, nullable=False),
        sa.Column("parts", sa.Integer, nullable=False),
        sa.Column("chars", sa.BigInteger, nullable=False),
        sa.Column(
            "extracted_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("revision_id", name="pk_revision_texts"),
        sa.ForeignKeyConstraint(
            ["revision_id"],
            [f"{schema}.file_revisions.id"],
            name="fk_revision_texts_revision_id_file_revisions",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("parts >= 0", name="ck_revision_texts_parts_not_negative"),
        sa.CheckConstraint("chars >= 0", name="ck_revision_texts_chars_not_negative"),
        sa.CheckConstraint("btrim(extractor) <> ''", name="ck_revision_texts_extractor_named"),
        schema=schema,
    )
    op.create_table(
        "revision_text_parts",
        sa.Column("revision_id", sa.Uuid, nullable=False),
        sa.Column("part_no", sa.Integer, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("revision_id", "part_no", name="pk_revision_text_parts"),
        sa.ForeignKeyConstraint(
            ["revision_id"],
            [f"{schema}.file_revisions.id"],
            name="fk_revision_text_parts_revision_id_file_revisions",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("part_no >= 1", name="ck_revision_text_parts_part_no_positive"),
        sa.CheckConstraint("length(body) <= 16000", name="ck_revision_text_parts_body_fits_index"),
        schema=schema,
    )
    op.create_table(
        "document_search",
        sa.Column("document_id", sa.Uuid, nullable=False),
        sa.Column("part_no", sa.Integer, nullable=False),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("terms", TSVECTOR, nullable=False),
        sa.PrimaryKeyConstraint("document_id", "part_no", name="pk_document_search"),
        sa.ForeignKeyConstraint(
            ["document_id"],
            [f"{schema}.documents.id"],
            name="fk_document_search_document_id_documents",
            ondelete="CASCADE",
        ),
        schema=schema,
    )
    op.create_index(
        "ix_document_search_terms",
        "document_search",
        ["terms"],
        schema=schema,
        postgresql_using="gin",
    )


def _create_functions(schema: str) -> None:
    unaccent_schema = _required_schema("unaccent")
    names = {
        "unaccent": sql.SQL("{}.unaccent")
        .format(sql.Identifier(unaccent_schema))
        .as_string(op.get_bind().connection.driver_connection),
        "dictionary": sql.Literal(f"{unaccent_schema}.unaccent").as_string(
            op.get_bind().connection.driver_connection
        )
        + "::regdictionary",
    }
    functions = (
        ("search_fold", "body text", "text", "sql IMMUTABLE PARALLEL SAFE STRICT", FOLD),
        ("search_header", "doc uuid, cfg regconfig", "tsvector", "sql STABLE", HEADER),
        ("search_rebuild", "doc uuid", "void", "plpgsql", REBUILD),
        ("search_refresh_header", "doc uuid", "void", "plpgsql", REFRESH_HEADER),
        *((name, "", "trigger", "plpgsql", body) for name, body in TRIGGER_FUNCTIONS.items()),
    )
    create_functions(
        op.get_bind(),
        schema,
        (
            (name, arguments, returns, language, body.format(**names))
            for name, arguments, returns, language, body in functions
        ),
    )


def _downgrade_tenant(schema: str) -> None:
    bind = op.get_bind()
    for trigger, table, _events in TRIGGERS:
        execute_ddl(
            bind,
            sql.SQL("DROP TRIGGER {} ON {}.{}").format(
                sql.Identifier(trigger), sql.Identifier(schema), sql.Identifier(table)
            ),
        )
    for table in ("document_search", "revision_text_parts", "revision_texts", "search_settings"):
        op.drop_table(table, schema=schema)
    op.drop_index("ix_documents_title_trgm", "documents", schema=schema)
    for name, arguments in (
        *((name, "") for name in TRIGGER_FUNCTIONS),
        ("search_refresh_header", "uuid"),
        ("search_rebuild", "uuid"),
        ("search_header", "uuid, regconfig"),
        ("search_fold", "text"),
    ):
        execute_ddl(
            bind,
            sql.SQL("DROP FUNCTION {}.{}({})").format(
                sql.Identifier(schema), sql.Identifier(name), sql.SQL(arguments)
            ),
        )
