"""Which rule a refused statement broke, asked the same way on plain PostgreSQL and on Citus.

For tests that check *which* invariant the database enforced, not only that it refused. On a
plain server the driver's error names the constraint (and the column of a NOT NULL). On a
Citus cluster a tenant's statement fails on the worker that holds the tenant, and the
coordinator passes on the SQLSTATE, message, detail and context of that error but not those
names, and the worker's own names carry the shard's suffix (``pk_documents_102008``). So:

* the rules that triggers enforce are told by their own SQLSTATE
  (:data:`dms.schema.tenant.GUARD_SQLSTATES`), as the library itself tells them;
* other constraints are read from the error's fields when the server gave them, and otherwise
  from the names PostgreSQL quotes in its message, without the shard suffix. Reading a message
  is fine for a test's verdict; the library never does it (it translates by SQLSTATE).
"""

from __future__ import annotations

import re

import psycopg

from dms.schema.tenant import GUARD_SQLSTATES

_RULES_BY_SQLSTATE = {sqlstate: rule for rule, sqlstate in GUARD_SQLSTATES.items()}
_QUOTED_CONSTRAINT = re.compile(r'constraint "([^"]+)"')
_QUOTED_COLUMN = re.compile(r'column "([^"]+)"')
_SHARD_SUFFIX = re.compile(r"_\d+$")


def violated_rule(error: psycopg.Error) -> str | None:
    """The rule (constraint or trigger-enforced rule) that refused the statement, if any."""
    rule = _RULES_BY_SQLSTATE.get(error.sqlstate or "")
    if rule is not None:
        return rule
    if error.diag.constraint_name:
        return error.diag.constraint_name
    name = _from_message(_QUOTED_CONSTRAINT, error)
    return None if name is None else _SHARD_SUFFIX.sub("", name)


def violated_column(error: psycopg.Error) -> str | None:
    """The column of a NOT NULL violation (or of another error that names one), if any."""
    if error.diag.column_name:
        return error.diag.column_name
    return _from_message(_QUOTED_COLUMN, error)


def _from_message(pattern: re.Pattern[str], error: psycopg.Error) -> str | None:
    found = pattern.search(error.diag.message_primary or "")
    return None if found is None else found.group(1)
