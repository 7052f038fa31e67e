"""``LOCK TABLE`` as a Core statement, so that it is routed and quoted like every other one.

Core has no construct for it, and a literal SQL string would escape ``schema_translate_map``
(it would lock ``public.documents``, or nothing). The table name goes through SQLAlchemy's
identifier preparer, which applies the tenant routing at execution time; the mode is one of
PostgreSQL's fixed keywords, never caller text.
"""

from __future__ import annotations

from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

#: The lock modes in use; add others here when a use case needs them.
LockMode = Literal["SHARE ROW EXCLUSIVE"]


class LockTable(Executable, ClauseElement):
    """``LOCK TABLE <table> IN <mode> MODE``, held until the end of the transaction."""

    inherit_cache = False

    def __init__(self, table: sa.Table, mode: LockMode) -> None:
        """Lock ``table`` (routed to the tenant's schema) in ``mode``."""
        self.table = table
        self.mode = mode


@compiles(LockTable)
def _compile_lock_table(element: LockTable, compiler: SQLCompiler, **kw: Any) -> str:
    table = compiler.preparer.format_table(element.table)
    return f"LOCK TABLE {table} IN {element.mode} MODE"
