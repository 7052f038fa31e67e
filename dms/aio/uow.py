"""The asyncio unit of work: :class:`dms.uow.UnitOfWork`, run in SQLAlchemy's greenlet bridge.

An :class:`AsyncUnitOfWork` holds a synchronous unit of work on the async engine's
``sync_engine`` and runs each call in a greenlet (:func:`sqlalchemy.util.greenlet_spawn`), the
way ``AsyncSession`` runs ``Session``: inside it, every statement goes to psycopg's
``AsyncConnection`` and its I/O is awaited by the event loop, no thread involved. The rules,
the statements, the routing to the tenant (``schema_translate_map``, no session state) and the
errors are the synchronous ones, because they are the same code.
"""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from dms.config import Settings, settings_of
from dms.domain.audit import WORKER, actor_setting
from dms.repositories._base import Repository
from dms.transaction import AsyncTenantTransaction, synchronous
from dms.uow import UnitOfWork

if TYPE_CHECKING:  # the repositories' typed twins, for type checkers (generated)
    from dms.aio.repositories import AsyncRepositories as _TypedRepositories
else:
    _TypedRepositories = object


def repository_kinds() -> dict[str, type[Repository]]:
    """The repositories a :class:`~dms.uow.UnitOfWork` hands out, by attribute name.

    Read from the unit of work itself (its properties that return a repository), so that an
    async twin exists for every repository the synchronous side has, and only for those.
    """
    kinds: dict[str, type[Repository]] = {}
    for name, member in vars(UnitOfWork).items():
        if isinstance(member, property) and member.fget is not None:
            returned = inspect.signature(member.fget, eval_str=True).return_annotation
            if isinstance(returned, type) and issubclass(returned, Repository):
                kinds[name] = returned
    return kinds


class AsyncUnitOfWork(AsyncTenantTransaction[UnitOfWork], _TypedRepositories):
    """A tenant-routed transaction for asyncio code; rolled back unless :meth:`commit` is awaited.

    ::

        async with AsyncUnitOfWork(engine, tenant="acme", user_id=alice) as uow:
            doc = await uow.documents.add(title="March.pdf")  # every repository, awaited
            await create_document(uow, title="Offer.pdf")     # dms.aio.services
            await jobs.enqueue(uow, "report.make", {...}, tenant="acme")
            await uow.commit()

    Arguments as :class:`dms.uow.UnitOfWork` (checked when it is made, before any I/O), with an
    engine of :func:`dms.create_async_engine`. :meth:`run` runs any synchronous function of the
    unit of work (a use case of the application's own, say) the same way; the rest (commit,
    rollback, savepoints) is :class:`~dms.transaction.AsyncTenantTransaction`'s.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        tenant: str,
        user_id: uuid.UUID | None = None,
        system: str | None = None,
        context: Mapping[str, object] | None = None,
        settings: Settings | None = None,
        lazy: bool = False,
    ) -> None:
        """Prepare the unit of work; nothing touches the database before ``async with``."""
        super().__init__(
            UnitOfWork(
                synchronous(engine),
                tenant=tenant,
                user_id=user_id,
                system=system,
                context=context,
                settings=settings,
                lazy=lazy,
            )
        )
        self.user_id = self.sync.user_id

    @classmethod
    def factory(  # type: ignore[override]
        cls, engine: AsyncEngine, *, settings: Settings | None = None, system: str = WORKER
    ) -> Callable[..., AsyncUnitOfWork]:
        """Make lazy units of work of ``engine`` by tenant, acting as ``system``: an async job's.

        As :meth:`dms.uow.UnitOfWork.factory`, on an async engine.
        """
        resolved = settings if settings is not None else settings_of(synchronous(engine))
        actor_setting(None, system)  # refused here, not at the first job

        def make(*, tenant: str) -> AsyncUnitOfWork:
            return cls(engine, tenant=tenant, system=system, settings=resolved, lazy=True)

        return make

    def __getattr__(self, name: str) -> AsyncRepositoryProxy:
        """The awaitable twin of the repository ``name`` (``documents``, ``folders``, ...)."""
        kind = _REPOSITORIES.get(name)
        if kind is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        proxy = AsyncRepositoryProxy(self, name, kind)
        setattr(self, name, proxy)  # made once: later lookups find it without __getattr__
        return proxy


class AsyncRepositoryProxy:
    """Every public method of a repository, with its signature, as a coroutine function."""

    def __init__(self, uow: AsyncUnitOfWork, name: str, kind: type[Repository]) -> None:
        """The repository ``uow.sync.<name>``, of class ``kind``."""
        self._uow, self._name, self._kind = uow, name, kind

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        """``method`` of the repository, awaited; its signature is the synchronous one's."""
        function = getattr(self._kind, method, None)
        if method.startswith("_") or not inspect.isfunction(function):
            raise AttributeError(f"{self._kind.__name__} has no public method {method!r}")
        uow, name = self._uow, self._name

        def call(*args: Any, **kwargs: Any) -> Any:
            # The repository is taken inside the greenlet: a lazy unit opens its connection.
            return getattr(getattr(uow.sync, name), method)(*args, **kwargs)

        @functools.wraps(function)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            result = await greenlet_spawn(functools.partial(call, *args, **kwargs))
            # An iterator reads as it is consumed: each step in the bridge too.
            return _stepped(result) if isinstance(result, Iterator) else result

        awaited.__signature__ = _bound_signature(function)  # type: ignore[attr-defined]
        setattr(self, method, awaited)  # made once per unit of work, as the proxy
        return awaited


async def _stepped(steps: Iterator[Any]) -> AsyncIterator[Any]:
    """``steps`` as an async iterator, each step run in the greenlet bridge."""
    done = object()
    while (item := await greenlet_spawn(next, steps, done)) is not done:
        yield item


@functools.cache
def _bound_signature(function: Callable[..., Any]) -> inspect.Signature:
    """``function``'s signature without ``self``, as it reads on an instance."""
    signature = inspect.signature(function)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


_REPOSITORIES = repository_kinds()
