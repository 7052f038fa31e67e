"""How a repository runs a statement that the database may refuse: in a savepoint, translated.

The translation itself (SQLSTATE, constraint name, the generic table) is
:mod:`dms.driver_errors`, shared with the layers below the repositories; what is the
repositories' own is the savepoint, and the constraints each repository names where it knows a
clearer error (``folders_no_cycle`` is a clearer story than "check violation").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from sqlalchemy.engine import Connection

from dms import driver_errors
from dms.driver_errors import ErrorFactory


@contextmanager
def translated(
    conn: Connection,
    what: str,
    *,
    constraints: Mapping[str, ErrorFactory] | None = None,
    savepoint: bool = True,
) -> Iterator[None]:
    """Run a block in a savepoint and raise database errors as domain errors.

    ``what`` and ``constraints`` are those of :func:`dms.driver_errors.translate`. The
    savepoint keeps the unit of work usable after a refused statement: only the block is
    undone, and the caller may go on or roll back. Bulk writes pass ``savepoint=False``: two
    round trips fewer per statement, and a refusal leaves the transaction aborted, to be
    rolled back (what an import does with a batch that fails anyway).
    """
    with driver_errors.translated(what, constraints=constraints):
        if savepoint:
            with conn.begin_nested():
                yield
        else:
            yield
