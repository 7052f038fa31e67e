"""The asyncio API: the unit of work, its repositories, the use cases and enqueue, awaited.

::

    engine = dms.create_async_engine()
    async with AsyncUnitOfWork(engine, tenant="acme", user_id=alice) as uow:
        doc = await services.create_document(uow, title="Offer.pdf")
        await jobs.enqueue(uow, "report.make", {"document": str(doc.id)}, tenant="acme")
        await uow.commit()

**One source of truth.** Nothing here writes a statement or a rule twice: every call runs the
synchronous code in SQLAlchemy's greenlet bridge (the way ``AsyncSession`` wraps ``Session``),
where its statements go to psycopg's ``AsyncConnection`` and the event loop awaits their I/O.
Generating an async copy of the code (psycopg's ``async_to_sync`` in reverse) was the other
way; it would double what a reader has to check for every rule, and the repositories' cost is
their round trips, which the bridge does not add to. A test compares the two sides' public
signatures (``tests/unit/test_async_api.py``).

:mod:`.uow` (the unit of work and its repositories), :mod:`.repositories` (the repositories'
twins as type checkers read them, generated), :mod:`.services` (the use cases), :mod:`.jobs`
(enqueue in the caller's transaction). Engines: :func:`dms.create_async_engine`.
"""

from . import jobs, services
from .uow import AsyncRepositoryProxy, AsyncUnitOfWork

__all__ = ["AsyncRepositoryProxy", "AsyncUnitOfWork", "jobs", "services"]
