"""The use cases of :mod:`dms.services`, awaited on an :class:`~dms.aio.AsyncUnitOfWork`.

Each is the synchronous use case itself, run by :meth:`AsyncUnitOfWork.run`: same arguments
after the unit of work, same result, same errors, same rules. A use case that reads blobs
(:func:`read_revision_content`) reads the store as the synchronous side does, blocking the
event loop for that read; a store of the application's own that does network I/O belongs in a
thread (``asyncio.to_thread``) until the stores have asyncio twins.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from dms import services
from dms.uow import UnitOfWork

from .uow import AsyncUnitOfWork

P = ParamSpec("P")
T = TypeVar("T")


def awaited(
    use_case: Callable[Concatenate[UnitOfWork, P], T],
) -> Callable[Concatenate[AsyncUnitOfWork, P], Coroutine[Any, Any, T]]:
    """``use_case`` as a coroutine function of an :class:`AsyncUnitOfWork`, same signature."""

    @functools.wraps(use_case)
    async def run(uow: AsyncUnitOfWork, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await uow.run(use_case, *args, **kwargs)

    return run


add_revision = awaited(services.add_revision)
clear_value = awaited(services.clear_value)
create_document = awaited(services.create_document)
define_field = awaited(services.define_field)
delete_folder = awaited(services.delete_folder)
read_revision_content = awaited(services.read_revision_content)
restore_folder = awaited(services.restore_folder)
search_documents = awaited(services.search_documents)
set_value = awaited(services.set_value)
set_values = awaited(services.set_values)
tag_documents = awaited(services.tag_documents)
untag_documents = awaited(services.untag_documents)

__all__ = [
    "add_revision",
    "awaited",
    "clear_value",
    "create_document",
    "define_field",
    "delete_folder",
    "read_revision_content",
    "restore_folder",
    "search_documents",
    "set_value",
    "set_values",
    "tag_documents",
    "untag_documents",
]
