"""An application's job handlers, as ``dms worker --app`` loads them (test_worker_app.py)."""

from __future__ import annotations

from collections.abc import Mapping

from dms.jobs import Handler, Job
from dms.storage import BlobStore
from dms.uow import UnitOfWork

GREET = "example.greet"
STORED = "example.stored"


def greet(uow: UnitOfWork, job: Job, /) -> None:
    """Succeed, having read the tenant's folders through its unit of work."""
    uow.folders.children(None)


#: An app as a mapping of kinds to handlers.
handlers: Mapping[str, Handler[UnitOfWork]] = {GREET: greet}


def with_store(store: BlobStore) -> Mapping[str, Handler[UnitOfWork]]:
    """An app as a callable that takes the worker's blob store."""

    def stored(uow: UnitOfWork, job: Job, /) -> None:
        store.put(f"{uow.tenant}/greeted/{job.id}", b"hello")

    return {STORED: stored}


#: Not an app.
not_an_app = 42
#: Handles a kind that dms handles already.
clashing: Mapping[str, Handler[UnitOfWork]] = {"revision.verify": greet}
