"""Many rows as one parameter: ``json_to_recordset`` over a JSON document, for any statement.

``INSERT ... SELECT ... FROM json_to_recordset(:rows)`` keeps a statement's text the same
whatever the batch size, so it is compiled and prepared once, has no limit on parameters, and
costs one ``json.dumps`` (in C) on the way out. The repositories (:mod:`dms.repositories`) and
the job queue (:mod:`dms.jobs._wire`) both send their batches this way; each encodes its own
values (ids as text, bytes as hex; job timestamps as epoch seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSON, JSONB
from sqlalchemy.sql.functions import Function
from sqlalchemy.types import TypeEngine


def recordset(
    name: str, columns: Sequence[tuple[str, TypeEngine[Any]]], *, jsonb: bool = False
) -> sa.TableValuedAlias:
    """``json_to_recordset(CAST(:name AS json)) AS name(column type, ...)``.

    The rows of the parameter ``name``: a JSON array of objects, one key per column.

    ``jsonb``: ``jsonb_to_recordset(CAST(:name AS jsonb))`` instead, for hot statements whose
    documents ``jsonb`` takes as they are (no escaped NUL, no duplicate keys: the job queue's
    validated batches). ``json_to_recordset`` builds a hash table of every object's keys;
    ``jsonb_to_recordset`` parses the document once and looks each column up in the parsed
    object: 0.08 ms instead of 0.35 ms for 100 objects of nine keys (PostgreSQL 15,
    bench/README.md). A ``jsonb`` column then takes its value without parsing it again.
    """
    document = sa.cast(sa.bindparam(name, type_=sa.Text), JSONB if jsonb else JSON)
    to_recordset = sa.func.jsonb_to_recordset if jsonb else sa.func.json_to_recordset
    function: Function[Any] = to_recordset(document)
    return function.table_valued(
        *(sa.column(column, type_) for column, type_ in columns)
    ).render_derived(name=name, with_types=True)
