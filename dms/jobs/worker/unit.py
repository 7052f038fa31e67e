"""The unit of work a handler runs in, as the worker sees it: a protocol and a factory.

``dms.jobs`` sits below the tenant :class:`dms.uow.UnitOfWork` (which loads every repository),
so it never imports it: a worker is given a factory of units of work instead,
``unit_of_work(tenant=...)``, and asks of what it makes only what :class:`JobUnitOfWork`
says. ``dms.uow.UnitOfWork.factory(engine)`` is the factory of tenant units of work with their
repositories (the ``dms worker`` command passes it); without a factory a worker runs its
handlers in a :class:`~dms.transaction.TenantTransaction` (re-exported here), which is enough
for handlers that write SQL.

Units of work are expected to open their connection lazily (on first use of
:attr:`JobUnitOfWork.connection`): a handler that never touches the database then costs no
pool checkout, and its job is completed in a batch by the worker's completer.

An ``async def`` handler gets an :class:`AsyncJobUnitOfWork` instead: a synchronous unit on an
async engine, bridged (:class:`~dms.transaction.AsyncTenantTransaction`, re-exported here, or
``dms.aio.AsyncUnitOfWork``); its factory is made from the engine of the worker's event loop,
``make_factory(async_engine)``, as :meth:`AsyncTenantTransaction.factory` does.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Protocol, TypeVar

import psycopg
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from dms.transaction import AsyncTenantTransaction, TenantTransaction


class JobUnitOfWork(Protocol):
    """What a worker needs of the unit of work that a handler runs in.

    A context manager that rolls back unless :meth:`commit` is called; :attr:`connection`
    (routed to the job's tenant) opened on first use, :attr:`opened` telling whether it was.
    """

    @property
    def connection(self) -> Connection:
        """The tenant-routed connection, in the unit's transaction."""

    @property
    def opened(self) -> bool:
        """Whether :attr:`connection` was asked for (and so opened)."""

    def commit(self) -> None:
        """Commit the unit's transaction."""

    def __enter__(self) -> object:
        """Begin the unit (a lazy unit opens nothing yet)."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        """Roll back what was not committed; give the connection back."""


U = TypeVar("U", bound=JobUnitOfWork)
U_co = TypeVar("U_co", bound=JobUnitOfWork, covariant=True)


class UnitOfWorkFactory(Protocol[U_co]):
    """Makes the unit of work of one job of ``tenant``."""

    def __call__(self, *, tenant: str) -> U_co:
        """A new, unopened unit of work routed to ``tenant``."""


class AsyncJobUnitOfWork(Protocol):
    """What a worker needs of the unit of work that an ``async def`` handler runs in.

    An async context manager that rolls back unless :meth:`commit` is awaited, over the
    synchronous unit :attr:`sync` (which the worker completes the job on, in the bridge).
    """

    @property
    def sync(self) -> JobUnitOfWork:
        """The synchronous unit underneath, on the async engine's ``sync_engine``."""

    async def commit(self) -> None:
        """Commit the unit's transaction."""

    async def __aenter__(self) -> object:
        """Begin the unit (a lazy unit opens nothing yet)."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        """Roll back what was not committed; give the connection back."""


A_co = TypeVar("A_co", bound=AsyncJobUnitOfWork, covariant=True)

#: Makes the factory of async units from the engine of the worker's event loop (one engine per
#: loop: asyncio connections belong to the loop they were opened in).
AsyncUnitOfWorkFactory = Callable[[AsyncEngine], Callable[..., A_co]]


def wrote(unit: JobUnitOfWork) -> bool:
    """Whether anything was executed in ``unit`` (its transaction has begun on the server)."""
    if not unit.opened:
        return False
    driver = unit.connection.connection.driver_connection
    return isinstance(driver, psycopg.Connection | psycopg.AsyncConnection) and (
        driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    )


__all__ = [
    "AsyncJobUnitOfWork",
    "AsyncTenantTransaction",
    "AsyncUnitOfWorkFactory",
    "JobUnitOfWork",
    "TenantTransaction",
    "UnitOfWorkFactory",
    "wrote",
]
