"""The unit of work a handler runs in, as the worker sees it: a protocol and a factory.

``dms.jobs`` sits below the tenant :class:`dms.uow.UnitOfWork` (which loads every repository),
so it never imports it: a worker is given a factory of units of work instead,
``unit_of_work(tenant=...)``, and asks of what it makes only what :class:`JobUnitOfWork`
says. ``dms.uow.UnitOfWork.factory(engine)`` is the factory of tenant units of work with their
repositories (the ``dms worker`` command passes it); without a factory a worker runs its
handlers in a :class:`TenantTransaction`, which is enough for handlers that write SQL.

Units of work are expected to open their connection lazily (on first use of
:attr:`JobUnitOfWork.connection`): a handler that never touches the database then costs no
pool checkout, and its job is completed in a batch by the worker's completer.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, TypeVar

import psycopg
from sqlalchemy.engine import Connection, Engine, Transaction

from dms import tenancy
from dms.config import Settings, settings_of
from dms.errors import DmsError


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


def wrote(unit: JobUnitOfWork) -> bool:
    """Whether anything was executed in ``unit`` (its transaction has begun on the server)."""
    if not unit.opened:
        return False
    driver = unit.connection.connection.driver_connection
    return isinstance(driver, psycopg.Connection) and (
        driver.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    )


class TenantTransaction:
    """A worker's default unit of work: a transaction routed to the job's tenant, opened lazily.

    No repositories (those live above ``dms.jobs``): handlers use :attr:`connection`. Pass
    ``unit_of_work=dms.uow.UnitOfWork.factory(engine)`` to a worker whose handlers want them.
    """

    def __init__(self, engine: Engine, *, tenant: str, settings: Settings | None = None) -> None:
        """Check the tenant's name; open nothing."""
        self.tenant = tenancy.validate_slug(tenant)
        self._engine = engine
        self._settings = settings if settings is not None else settings_of(engine)
        self._conn: Connection | None = None
        self._transaction: Transaction | None = None

    @classmethod
    def factory(
        cls, engine: Engine, *, settings: Settings | None = None
    ) -> UnitOfWorkFactory[TenantTransaction]:
        """Make units of ``engine``, with ``settings`` resolved once rather than per job."""
        resolved = settings if settings is not None else settings_of(engine)

        def make(*, tenant: str) -> TenantTransaction:
            return cls(engine, tenant=tenant, settings=resolved)

        return make

    def __enter__(self) -> TenantTransaction:
        """Open nothing yet: the first use of :attr:`connection` does."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Roll back whatever was not committed, and give the connection back."""
        try:
            if self._transaction is not None and self._transaction.is_active:
                self._transaction.rollback()
        finally:
            if self._conn is not None:
                self._conn.close()

    @property
    def opened(self) -> bool:
        """Whether the connection was asked for."""
        return self._conn is not None

    @property
    def connection(self) -> Connection:
        """The routed connection, opened (and its transaction begun) on first use."""
        if self._conn is None:
            self._conn = tenancy.route(self._engine.connect(), self.tenant, self._settings)
            self._transaction = self._conn.begin()
        return self._conn

    def commit(self) -> None:
        """Commit the transaction (if it was ever opened)."""
        if self._transaction is None:
            if self._conn is None:
                return
            raise DmsError("the transaction has ended")
        self._transaction.commit()
