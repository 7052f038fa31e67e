"""What the queue's functions run on: a connection, or anything that holds one.

Every function of :mod:`dms.jobs` takes an :data:`Executor` and runs in that connection's
transaction. A unit of work qualifies through its ``connection`` property, without
:mod:`dms.jobs` importing it: the queue sits below the unit of work and the repositories, and
importing it loads none of them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sqlalchemy.engine import Connection


@runtime_checkable
class HoldsConnection(Protocol):
    """Anything whose ``connection`` is the SQLAlchemy connection to run on (a unit of work)."""

    @property
    def connection(self) -> Connection:
        """The connection, in the transaction the queue's statements join."""
        ...


#: A connection, or something holding one (:class:`HoldsConnection`), such as a unit of work.
Executor = Connection | HoldsConnection


def connection_of(target: Executor) -> Connection:
    """The connection that ``target`` is or holds."""
    # A Connection has a ``connection`` attribute of its own (the DBAPI connection): test first.
    return target if isinstance(target, Connection) else target.connection
