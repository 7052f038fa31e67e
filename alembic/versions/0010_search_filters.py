"""The content search's folder and tag filters answered by its index.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05

Tenant only. A content search inside a folder or with tags used to walk every index row the
words match and look up each one's document until enough passed the filter: with a common word
and a folder holding 1 % of the documents, most of the word's matches (hundreds of milliseconds
at 1,000,000 documents, bench/results/search.md). Now each row of ``document_search`` also
holds ``filters``: the ids of its document's folder and every folder above it, and of its tags
(ids are unique across tables, so one array holds both). The GIN index covers ``terms`` and
``filters`` together, so a search intersects the word's matches with the folder's or tag's in
the index, as an inverted index intersects posting lists. The conditions on ``documents`` are
still applied to what the index returns, so ``filters`` only has to contain the truth, never to
be it: a document is never missed, whatever the order in which triggers run.

Kept in step by triggers, in the transaction of the change, raw SQL included:

* ``search_filters_row``, BEFORE INSERT or UPDATE OF ``terms`` on ``document_search``: every row
  revision 0009's ``search_rebuild`` inserts and every header ``search_refresh_header`` rewrites
  (which a tag link change does) gets its document's filters;
* ``search_document_moved``, after ``documents.folder_id`` changes: that document's rows;
* ``search_folder_moved``, after ``folders.parent_id`` changes: the rows of every document in
  the moved subtree.

The upgrade fills the column for existing rows; the downgrade drops all of it and puts revision
0009's index back.
"""

from __future__ import annotations

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects.postgresql import ARRAY

from alembic import op
from dms.migrations import MigrationScope
from dms.migrations.steps import call_for_each_document
from dms.schema.ddl import create_functions, create_trigger, drop_trigger, execute_ddl

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

#: The folder of the document and every folder above it, then the document's tags. The folder
#: walk is bounded by the tree's depth limit (and UNION stops on a cycle, which the folders'
#: own trigger refuses anyway).
FILTERS = """
SELECT array(
    WITH RECURSIVE up (id, parent_id) AS (
        SELECT f.id, f.parent_id FROM folders f
         WHERE f.id = (SELECT d.folder_id FROM documents d WHERE d.id = doc)
        UNION
        SELECT f.id, f.parent_id FROM folders f JOIN up ON f.id = up.parent_id
    )
    SELECT id FROM up
) || array(SELECT tag_id FROM document_tags WHERE document_id = doc)
"""

#: Every row of one document again. The array is computed first and written as a value: on
#: Citus the UPDATE is then routed to the tenant's node as it is.
REFRESH_FILTERS = """
DECLARE
    current uuid[] := search_filters(doc);
BEGIN
    UPDATE document_search SET filters = current WHERE document_id = doc;
END
"""

FILTERS_ROW = """
BEGIN
    NEW.filters := search_filters(NEW.document_id);
    RETURN NEW;
END
"""

DOCUMENT_MOVED = """
BEGIN
    PERFORM search_refresh_filters(NEW.id);
    RETURN NULL;
END
"""

#: One statement per folder and per document (single-table statements, for Citus as in 0009).
FOLDER_MOVED = """
DECLARE
    folder uuid;
    doc uuid;
BEGIN
    FOR folder IN
        WITH RECURSIVE below (id) AS (
            SELECT NEW.id
            UNION
            SELECT f.id FROM folders f JOIN below ON f.parent_id = below.id
        )
        SELECT id FROM below
    LOOP
        FOR doc IN SELECT id FROM documents WHERE folder_id = folder LOOP
            PERFORM search_refresh_filters(doc);
        END LOOP;
    END LOOP;
    RETURN NULL;
END
"""

#: (name, arguments, returns, language, body); dropped in reverse order.
FUNCTIONS = (
    ("search_filters", "doc uuid", "uuid[]", "sql STABLE", FILTERS),
    ("search_refresh_filters", "doc uuid", "void", "plpgsql", REFRESH_FILTERS),
    ("search_filters_row", "", "trigger", "plpgsql", FILTERS_ROW),
    ("search_document_moved", "", "trigger", "plpgsql", DOCUMENT_MOVED),
    ("search_folder_moved", "", "trigger", "plpgsql", FOLDER_MOVED),
)

#: (trigger, timing and events, table, condition).
TRIGGERS = (
    ("search_filters_row", "BEFORE INSERT OR UPDATE OF terms", "document_search", None),
    (
        "search_document_moved",
        "AFTER UPDATE OF folder_id",
        "documents",
        "OLD.folder_id IS DISTINCT FROM NEW.folder_id",
    ),
    (
        "search_folder_moved",
        "AFTER UPDATE OF parent_id",
        "folders",
        "OLD.parent_id IS DISTINCT FROM NEW.parent_id",
    ),
)


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)


def _upgrade_tenant(schema: str) -> None:
    op.add_column("document_search", sa.Column("filters", ARRAY(sa.Uuid)), schema=schema)
    create_functions(op.get_bind(), schema, FUNCTIONS)
    for trigger, events, table, condition in TRIGGERS:
        create_trigger(op.get_bind(), schema, trigger, events=events, table=table, when=condition)
    call_for_each_document(op.get_bind(), schema, "search_refresh_filters")
    op.alter_column("document_search", "filters", nullable=False, schema=schema)
    op.drop_index("ix_document_search_terms", "document_search", schema=schema)
    op.create_index(
        "ix_document_search_terms_filters",
        "document_search",
        ["terms", "filters"],
        schema=schema,
        postgresql_using="gin",
    )


def _downgrade_tenant(schema: str) -> None:
    bind = op.get_bind()
    op.drop_index("ix_document_search_terms_filters", "document_search", schema=schema)
    op.create_index(
        "ix_document_search_terms",
        "document_search",
        ["terms"],
        schema=schema,
        postgresql_using="gin",
    )
    for trigger, _events, table, _condition in TRIGGERS:
        drop_trigger(bind, schema, trigger, table=table)
    op.drop_column("document_search", "filters", schema=schema)
    for name, arguments, _returns, _language, _body in reversed(FUNCTIONS):
        types = ", ".join(argument.split()[-1] for argument in arguments.split(",") if argument)
        execute_ddl(
            bind,
            sql.SQL("DROP FUNCTION {}.{}({})").format(
                sql.Identifier(schema), sql.Identifier(name), sql.SQL(types)
            ),
        )
