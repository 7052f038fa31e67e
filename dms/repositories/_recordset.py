"""Many rows in one statement: a batch travels as one JSON document, read by the server.

``INSERT ... SELECT ... FROM json_to_recordset(:rows)`` keeps the statement's text the same
whatever the batch size, so it is compiled once and prepared once per connection, has no
limit on parameters, and costs one ``json.dumps`` (in C) on the way out. Ids travel as text,
bytes as hex.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSON
from sqlalchemy.sql.functions import Function
from sqlalchemy.types import TypeEngine


def recordset(name: str, columns: Sequence[tuple[str, TypeEngine[Any]]]) -> sa.TableValuedAlias:
    """``json_to_recordset(CAST(:name AS json)) AS name(column type, ...)``."""
    document = sa.cast(sa.bindparam(name, type_=sa.Text), JSON)
    function: Function[Any] = sa.func.json_to_recordset(document)
    return function.table_valued(
        *(sa.column(column, type_) for column, type_ in columns)
    ).render_derived(name=name, with_types=True)


def encode(rows: Sequence[dict[str, Any]]) -> str:
    """The document of ``rows`` (ids as ``str``, bytes as ``bytes.hex()``)."""
    return json.dumps(list(rows), separators=(",", ":"), default=str)


def any_of(column: sa.ColumnElement[Any], values: Sequence[Any]) -> sa.ColumnElement[bool]:
    """``column = ANY(:values)``: one array parameter, not one parameter per value.

    The statement's text stays the same whatever the number of values.
    """
    return column == sa.any_(sa.literal(list(values), ARRAY(column.type)))
