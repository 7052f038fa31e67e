"""How a repository runs a statement that the database may refuse: in a savepoint, translated.

The translation itself (SQLSTATE, constraint name, the generic table) is
:mod:`dms.driver_errors`, shared with the layers below the repositories; what is the
repositories' own is the savepoint, and the constraints each repository names where it knows a
clearer error (``folders_no_cycle`` is a clearer story than "check violation").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms import driver_errors
from dms.driver_errors import ErrorFactory
from dms.errors import NotFound
from dms.schema import tenant as t

#: ``known_users``' key to the IAM's ``users``: what refuses a row that names a user who does
#: not exist (trigger ``known_users_enlist`` adds the user there first: ``schema/sql/users.sql``).
UNKNOWN_USER = "fk_known_users_id_users"


@contextmanager
def translated(
    conn: Connection,
    what: str,
    *,
    constraints: Mapping[str, ErrorFactory] | None = None,
    savepoint: bool = True,
    user: uuid.UUID | None = None,
) -> Iterator[None]:
    """Run a block in a savepoint and raise database errors as domain errors.

    ``what`` and ``constraints`` are those of :func:`dms.driver_errors.translate`. ``user`` is
    the user whom the block's rows name (the acting user who writes them, a grantee, an owner):
    if the IAM's ``users`` table has no such user, the error is :class:`~dms.errors.NotFound`
    naming them, rather than a refusal of ``what``. The savepoint keeps the unit of work usable
    after a refused statement: only the block is undone, and the caller may go on or roll back.
    Bulk writes pass ``savepoint=False``: two round trips fewer per statement, and a refusal
    leaves the transaction aborted, to be rolled back (what an import does with a batch that
    fails anyway).
    """
    if user is not None:
        constraints = {UNKNOWN_USER: _unknown(user), **(constraints or {})}
    try:
        with driver_errors.translated(what, constraints=constraints):
            if savepoint:
                with conn.begin_nested():
                    yield
            else:
                yield
    except NotFound as refused:
        # On Citus a refusal comes from the node that holds the tenant without its key's name:
        # whether the user exists says whether it was theirs.
        if user is None or _user_exists(conn, user, aborted=not savepoint):
            raise
        raise _unknown(user)() from refused.__cause__


def _user_exists(conn: Connection, user: uuid.UUID, *, aborted: bool) -> bool:
    """Whether the IAM knows ``user``.

    Asked in ``conn``'s transaction (its savepoint undone), or on a connection of its own when
    that transaction is aborted.
    """
    query = sa.select(sa.exists().where(t.users.c.id == user))
    if not aborted:
        return bool(conn.execute(query).scalar())
    with conn.engine.connect() as other:
        routed = other.execution_options(**conn.get_execution_options())
        return bool(routed.execute(query).scalar())


def _unknown(user: uuid.UUID) -> ErrorFactory:
    return lambda: NotFound(f"user {user} does not exist (not in the IAM's users table)")
