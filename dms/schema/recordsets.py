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
from sqlalchemy.dialects.postgresql import JSON
from sqlalchemy.sql.functions import Function
from sqlalchemy.types import TypeEngine


def recordset(name: str, columns: Sequence[tuple[str, TypeEngine[Any]]]) -> sa.TableValuedAlias:
    """``json_to_recordset(CAST(:name AS json)) AS name(column type, ...)``.

    The rows of the parameter ``name``: a JSON array of objects, one key per column.
    """
    document = sa.cast(sa.bindparam(name, type_=sa.Text), JSON)
    function: Function[Any] = sa.func.json_to_recordset(document)
    return function.table_valued(
        *(sa.column(column, type_) for column, type_ in columns)
    ).render_derived(name=name, with_types=True)
