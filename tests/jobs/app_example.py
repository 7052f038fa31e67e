"""An application's job handlers, as ``dms worker --app`` loads them (test_worker_app.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from dms.jobs import App, Handler, Job, Schedule
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


#: The environment variable naming the tenant of :func:`scheduled`'s schedule.
TENANT_VARIABLE = "DMS_EXAMPLE_TENANT"
#: The name of :func:`scheduled`'s schedule.
EVERY_MINUTE = "example.greet-every-minute"


def greeting(tenant: str) -> Schedule:
    """The schedule of :func:`scheduled`: a greeting every minute, for ``tenant``."""
    return Schedule(name=EVERY_MINUTE, cron="* * * * *", kind=GREET, tenant=tenant)


def scheduled(store: BlobStore) -> App:
    """An app with a schedule: :func:`greeting`, for the tenant the test names."""
    return App(handlers, [greeting(os.environ[TENANT_VARIABLE])])


#: An app as a dms.jobs.App value, whose schedule takes the name of :func:`scheduled`'s.
app = App({STORED: greet}, [Schedule(name=EVERY_MINUTE, cron="@daily", kind=STORED, tenant="acme")])
