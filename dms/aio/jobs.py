"""Enqueueing jobs from asyncio code, in the caller's transaction.

:func:`enqueue` and :func:`enqueue_many` are :func:`dms.jobs.enqueue` and
:func:`dms.jobs.enqueue_many`, awaited on an :class:`~dms.aio.AsyncUnitOfWork` (the job commits
with the documents, or neither does), on an async job handler's unit
(:class:`~dms.transaction.AsyncTenantTransaction`) or on an ``AsyncConnection`` of the
application's own (in whatever transaction it has begun: procrastinate and pgqueuer offer no
such thing).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from dms import jobs
from dms.domain.validation import shown
from dms.errors import ValidationError
from dms.jobs.executor import Executor
from dms.transaction import AsyncTenantTransaction

P = ParamSpec("P")
T = TypeVar("T")

#: Where a job can be enqueued from asyncio code.
AsyncExecutor = AsyncTenantTransaction[Any] | AsyncConnection


def awaited(
    call: Callable[Concatenate[Executor, P], T],
) -> Callable[Concatenate[AsyncExecutor, P], Coroutine[Any, Any, T]]:
    """``call`` of the queue on an :data:`AsyncExecutor`, same signature after it."""

    @functools.wraps(call)
    async def run(target: AsyncExecutor, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if isinstance(target, AsyncTenantTransaction):
            return await target.run(call, *args, **kwargs)
        if isinstance(target, AsyncConnection):
            return await target.run_sync(call, *args, **kwargs)
        raise ValidationError(
            f"jobs are enqueued on an AsyncUnitOfWork or an AsyncConnection, not {shown(target)}"
        )

    return run


enqueue = awaited(jobs.enqueue)
enqueue_many = awaited(jobs.enqueue_many)

__all__ = ["AsyncExecutor", "enqueue", "enqueue_many"]
