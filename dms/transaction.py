"""A transaction routed to one tenant: the one base of every unit that handlers and services use.

:class:`TenantTransaction` takes a connection of the engine, routes it to the tenant
(:func:`dms.tenancy.route`, ``schema_translate_map``) and begins a transaction, at ``with`` or
(``lazy``) on first use of :attr:`~TenantTransaction.connection`; it rolls back whatever was not
committed when the block ends. Two classes build on it: :class:`dms.uow.UnitOfWork` (the
repositories, and who acts) and, as it is, a job worker's default unit of work
(:class:`dms.jobs.worker.TenantTransaction`, re-exported there: ``dms.jobs`` sits below the
repositories, this module below both). One implementation, so that the two cannot drift apart
in how they end.

:class:`AsyncTenantTransaction` is the same unit for asyncio code: it holds a synchronous one
on an async engine's ``sync_engine`` and runs each call in SQLAlchemy's greenlet bridge
(:func:`sqlalchemy.util.greenlet_spawn`, as ``AsyncSession`` runs ``Session``), so that the
statements go to psycopg's ``AsyncConnection`` and the event loop awaits them.
:class:`dms.aio.AsyncUnitOfWork` is it over a :class:`dms.uow.UnitOfWork`, and an async job
handler's default unit of work is it as it is.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from psycopg import pq
from sqlalchemy.engine import Connection, Engine, Transaction
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from dms import tenancy
from dms.config import Settings, settings_of
from dms.domain.validation import shown
from dms.errors import ConfigurationError, DmsError, TransactionFailed, ValidationError

log = logging.getLogger(__name__)

_T = TypeVar("_T", bound="TenantTransaction")
_S = TypeVar("_S", bound="TenantTransaction")
_P = ParamSpec("_P")
_R = TypeVar("_R")
_A = TypeVar("_A", bound="AsyncTenantTransaction[Any]")


class TenantTransaction:
    """A transaction routed to ``tenant``, single use, rolled back unless committed.

    Opened at ``with``, or with ``lazy`` at the first use of :attr:`connection` (a job handler
    that never touches the database then costs no pool checkout). No repositories: handlers
    use :attr:`connection`; :class:`dms.uow.UnitOfWork` adds them.
    """

    def __init__(
        self, engine: Engine, *, tenant: str, settings: Settings | None = None, lazy: bool = True
    ) -> None:
        """Check the tenant's name and the settings; open nothing."""
        self.tenant = tenancy.validate_slug(tenant)
        if settings is not None and not isinstance(settings, Settings):
            raise ConfigurationError(f"settings must be a dms.Settings, not {shown(settings)}")
        self._engine = engine
        self._settings = settings if settings is not None else settings_of(engine)
        self._lazy = lazy
        self._conn: Connection | None = None
        self._transaction: Transaction | None = None
        self._used = False
        self._entered = False

    @classmethod
    def factory(
        cls: type[_T], engine: Engine, *, settings: Settings | None = None
    ) -> Callable[..., _T]:
        """Make lazy units of ``engine`` by tenant, ``make(tenant=...)``; settings resolved once."""
        resolved = settings if settings is not None else settings_of(engine)

        def make(*, tenant: str) -> _T:
            return cls(engine, tenant=tenant, settings=resolved, lazy=True)

        return make

    def __enter__(self: _T) -> _T:
        """Begin the unit: open the connection now, or (``lazy``) at its first use."""
        if self._used:
            raise DmsError(f"a {type(self).__name__} is single-use; create a new one")
        self._used = True
        self._entered = True
        if not self._lazy:
            self._open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Roll back whatever was not committed, and give the connection back.

        When the block raised, a rollback that fails as well (its connection died, say) is
        logged and the block's exception goes on: it is the cause, and the caller must see it.
        An interrupt (``KeyboardInterrupt`` from Ctrl-C or SIGTERM, a cancelled task) may have
        landed in the middle of a statement, where the connection cannot take a ROLLBACK: it
        is closed instead, and the server rolls the transaction back.
        """
        try:
            self._end(interrupted=exc is not None and not isinstance(exc, Exception))
        except Exception:
            if exc is None:
                raise
            log.warning(
                "%s of tenant %r: rolling back after %s failed too",
                type(self).__name__,
                self.tenant,
                type(exc).__name__,
                exc_info=True,
            )

    @property
    def opened(self) -> bool:
        """Whether the connection was opened (a lazy unit opens it at first use)."""
        return self._conn is not None

    @property
    def connection(self) -> Connection:
        """The routed connection, in the unit's transaction; only inside ``with``."""
        if self._conn is None and self._entered:
            self._open()
        if self._conn is None or self._transaction is None:
            raise DmsError(f"the {type(self).__name__} is not open: use it in a with block")
        return self._conn

    def commit(self) -> None:
        """Commit everything done in the unit; it is closed for writes afterwards.

        A lazy unit that never opened its connection has nothing to commit: a no-op.
        """
        if self._entered and self._conn is None:
            return
        if self._transaction is None or not self._transaction.is_active:
            raise DmsError(f"nothing to commit: the {type(self).__name__} is not open")
        if self._conn is not None and _failed(self._conn):
            # PostgreSQL answers COMMIT of a failed transaction with a ROLLBACK, and the driver
            # raises nothing: the caller would believe the work committed.
            self._transaction.rollback()
            raise TransactionFailed(
                f"the {type(self).__name__} of tenant {self.tenant!r} cannot commit: a statement "
                "failed in it (outside a savepoint) and nothing of it was kept"
            )
        self._transaction.commit()

    def rollback(self) -> None:
        """Throw away everything done in the unit."""
        if self._transaction is not None and self._transaction.is_active:
            self._transaction.rollback()

    def _open(self) -> None:
        conn = tenancy.route(self._engine.connect(), self.tenant, self._settings)
        self._conn = conn
        self._transaction = conn.begin()
        self._began(conn)

    def _began(self, conn: Connection) -> None:
        """What a subclass does first in each transaction (the unit of work names who acts)."""

    def _end(self, *, interrupted: bool = False) -> None:
        try:
            if self._transaction is not None and self._transaction.is_active:
                if interrupted and self._conn is not None:
                    self._conn.invalidate()
                else:
                    self._transaction.rollback()
        finally:
            if self._conn is not None:
                self._conn.close()
            self._transaction = None
            self._entered = False
            self._ended()

    def _ended(self) -> None:
        """What a subclass lets go of when the unit ends (the unit of work, its repositories)."""


class AsyncTenantTransaction(Generic[_S]):
    """A :class:`TenantTransaction` for asyncio code, rolled back unless :meth:`commit` is awaited.

    ``async with`` it; :meth:`run` runs a synchronous function of the unit underneath
    (:attr:`sync`: its connection, its repositories) in the greenlet bridge, awaited.
    """

    def __init__(self, unit: _S) -> None:
        """Bridge ``unit``, a synchronous unit on an async engine's ``sync_engine``."""
        self.sync = unit
        """The synchronous unit underneath; use it only inside :meth:`run`."""
        self.tenant = unit.tenant

    @classmethod
    def factory(
        cls, engine: AsyncEngine, *, settings: Settings | None = None
    ) -> Callable[..., AsyncTenantTransaction[TenantTransaction]]:
        """Make lazy units of ``engine`` by tenant, ``make(tenant=...)``: an async job's unit."""
        make_sync = TenantTransaction.factory(synchronous(engine), settings=settings)

        def make(*, tenant: str) -> AsyncTenantTransaction[TenantTransaction]:
            return AsyncTenantTransaction(make_sync(tenant=tenant))

        return make

    async def __aenter__(self: _A) -> _A:
        """Begin: take a connection (or, lazy, at first use) and route it to the tenant."""
        await greenlet_spawn(self.sync.__enter__)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Roll back whatever was not committed, and give the connection back."""
        await greenlet_spawn(self.sync.__exit__, exc_type, exc, traceback)

    async def commit(self) -> None:
        """Commit everything done in the unit (:meth:`TenantTransaction.commit`)."""
        await greenlet_spawn(self.sync.commit)

    async def rollback(self) -> None:
        """Throw away everything done in the unit."""
        await greenlet_spawn(self.sync.rollback)

    async def run(
        self, function: Callable[Concatenate[_S, _P], _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> _R:
        """``function(unit, *args, **kwargs)`` on the synchronous unit, awaited."""
        return await greenlet_spawn(functools.partial(function, self.sync, *args, **kwargs))

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """Run a block in a savepoint: an error inside it undoes only the block."""
        # The connection is taken inside the bridge: a lazy unit connects at its first use.
        block = await greenlet_spawn(lambda: self.sync.connection.begin_nested())  # noqa: PLW0108
        try:
            yield
        except BaseException:
            await greenlet_spawn(block.__exit__, *sys.exc_info())  # rolls back to the savepoint
            raise
        else:
            await greenlet_spawn(block.__exit__, None, None, None)


def synchronous(engine: object) -> Engine:
    """The synchronous engine inside the async ``engine``, which is refused if it is not one."""
    if not isinstance(engine, AsyncEngine):
        raise ValidationError(
            f"engine must be an AsyncEngine (dms.create_async_engine), not {shown(engine)}"
        )
    return engine.sync_engine


def _failed(conn: Connection) -> bool:
    """Whether the server holds ``conn``'s transaction as failed (a statement errored in it)."""
    driver = conn.connection.driver_connection
    status = getattr(getattr(driver, "info", None), "transaction_status", None)
    return bool(status == pq.TransactionStatus.INERROR)
