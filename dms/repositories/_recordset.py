"""Batches of the repositories: one JSON document per statement, ids as text, bytes as hex.

The server reads such a document with :func:`dms.schema.recordsets.recordset`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY


def encode(rows: Sequence[dict[str, Any]]) -> str:
    """The document of ``rows`` (ids as ``str``, bytes as ``bytes.hex()``)."""
    return json.dumps(list(rows), separators=(",", ":"), default=str)


def any_of(column: sa.ColumnElement[Any], values: Sequence[Any]) -> sa.ColumnElement[bool]:
    """``column = ANY(:values)``: one array parameter, not one parameter per value.

    The statement's text stays the same whatever the number of values.
    """
    return column == sa.any_(sa.literal(list(values), ARRAY(column.type)))
