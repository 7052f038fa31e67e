"""Steps that revisions share: work on every row of a tenant, and earlier revisions' texts.

A revision that must call one of the tenant's own functions for each document (index it,
fill a new column) cannot write ``SELECT fn(id) FROM documents``: on Citus that query runs on
the tenant's node, inside a query on a shard, where a function that reads other tables
cannot run. :func:`call_for_each_document` reads the ids first and gives them back as a
parameter, so that the function runs where the revision's statement runs.
:func:`earlier_revision` gives a revision the module of one below it, whose text (a function's
body, a policy's rule) it derives its own from and puts back on its downgrade.
"""

from __future__ import annotations

from types import ModuleType

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection
from sqlalchemy.sql.functions import Function

from alembic import op

#: Documents per statement.
DOCUMENTS_PER_CALL = 1000


def call_for_each_document(conn: Connection, schema: str, function: str) -> None:
    """Call ``schema.function(id)`` once for every document of the tenant in ``schema``."""
    documents = sa.table("documents", sa.column("id", sa.Uuid), schema=schema)
    ids = list(conn.execute(sa.select(documents.c.id)).scalars())
    for start in range(0, len(ids), DOCUMENTS_PER_CALL):
        batch = ids[start : start + DOCUMENTS_PER_CALL]
        given = (
            sa.func.unnest(sa.bindparam("ids", batch, type_=ARRAY(sa.Uuid)))
            .table_valued("id")
            .render_derived(name="given")
        )
        call: Function[object] = Function(function, given.c.id, packagenames=(schema,))
        conn.execute(sa.select(sa.func.count(call)).select_from(given))


def earlier_revision(name: str) -> ModuleType:
    """The module of revision ``name``, from the running migration's script directory."""
    script = op.get_context().script
    assert script is not None  # noqa: S101 (alembic sets it while a revision runs)
    revision = script.get_revision(name)
    assert revision is not None  # noqa: S101 (a revision names only revisions below it)
    module: ModuleType = revision.module
    return module
