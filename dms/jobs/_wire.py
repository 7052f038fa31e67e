"""How batches of jobs cross the wire: one JSON document per statement, in both directions.

psycopg adapts a list parameter element by element in Python, and decodes ``jsonb``, ``uuid``
and ``timestamptz`` columns with Python work per value (``timestamptz`` goes through the
session's ``zoneinfo`` time zone). Counted with callgrind on a worker's claim-and-complete path
(bench/README.md): a completion of 100 jobs passed as three arrays cost 4.5 million
instructions, a claimed row 39,000. A batch as one JSON document is written by one
``json.dumps`` and read by one ``json.loads``, both in C; PostgreSQL reads it with
``json_to_recordset`` and writes it with ``json_agg``.

Conventions of these documents: a job id travels as text (``uuid::text``, or the 32 hex digits
of ``UUID.hex`` towards the server), a timestamp as seconds since the Unix epoch (see
:func:`seconds`; ISO 8601 text would need Python 3.11's ``fromisoformat`` for PostgreSQL's
trimmed fractions), and a ``jsonb`` value as itself.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from dms.jobs._ids import uuid_of


def rows(*columns: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """``json_agg(json_build_array(columns...))``: the rows of a query as one JSON array.

    ``NULL`` when there are no rows.
    """
    return sa.func.json_agg(sa.func.json_build_array(*columns))


def document(*values: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    """``json_build_array(values...)::text``: one text value, read by :func:`decode`."""
    return sa.cast(sa.func.json_build_array(*values), sa.Text)


def seconds(column: sa.ColumnElement[datetime]) -> sa.ColumnElement[float]:
    """A ``timestamptz`` as seconds since the Unix epoch: ``date_part('epoch', column)``.

    A double: exact to the microsecond (its error is below 0.12 µs until the year 2242, and
    :class:`Timestamps` rounds to the microsecond), and far cheaper for the server than the
    ``numeric`` of ``extract``.
    """
    return sa.func.date_part(sa.literal_column("'epoch'"), column, type_=sa.Float)


def decode(document: str) -> list[Any]:
    """The values of a :func:`document`."""
    values: list[Any] = json.loads(document)
    return values


def job_id(text: str) -> uuid.UUID:
    """The id of a job from its text (``uuid::text``: hex digits and dashes)."""
    return uuid_of(int(text.replace("-", ""), 16))


class Timestamps:
    """Datetimes (UTC) of :func:`seconds` values, each distinct value converted once.

    The rows of a claim share most of their timestamps: jobs enqueued together share
    ``created_at`` and usually ``run_at``.
    """

    def __init__(self) -> None:
        """Start with no conversions."""
        self._seen: dict[float, datetime] = {}

    def __call__(self, seconds: float) -> datetime:
        """The datetime of ``seconds`` since the epoch, rounded to the microsecond."""
        seen = self._seen.get(seconds)
        if seen is None:
            seen = self._seen[seconds] = datetime.fromtimestamp(seconds, timezone.utc)
        return seen
