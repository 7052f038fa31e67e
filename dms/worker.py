"""The document layer's :class:`DocumentWorker`: handlers run in the tenant :class:`UnitOfWork`.

:class:`dms.jobs.Worker` sits below the repositories and defaults to a bare
:class:`~dms.jobs.worker.TenantTransaction`; this is the same worker one layer up, where the
unit of work of a job, unless another factory is given, is ``UnitOfWork.factory(engine)``
(lazy: a handler that never touches the database opens no connection).

A worker that claims ``audit.sweep`` jobs (dms's own handlers, :func:`dms.processing.handlers`)
also keeps the schedule of those sweeps registered (:mod:`dms.sealing`): every tenant's audit
trail is then sealed without an outside cron.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from dms import jobs
from dms.aio.uow import AsyncUnitOfWork
from dms.config import settings_of
from dms.jobs.worker import UnitOfWorkFactory
from dms.sealing import (
    KEEP_SCHEDULED_SECONDS,
    SWEEP_AUDIT_TRAILS,
    check_seal_cron,
    keep_sealing_scheduled,
)
from dms.uow import UnitOfWork


class DocumentWorker(jobs.Worker[UnitOfWork]):
    """A :class:`dms.jobs.Worker` whose handlers get the job tenant's :class:`UnitOfWork`.

    ``handler(uow, job)`` reads and writes through ``uow.documents``, ``uow.metadata`` and
    the rest; the worker commits the unit when the handler returns, rolls it back when it
    raises. An ``async def`` handler gets a :class:`~dms.aio.AsyncUnitOfWork` instead
    (``await uow.documents.get(...)``), many of them in flight on one event loop. Arguments as
    :class:`dms.jobs.Worker`.

    If it claims ``audit.sweep`` jobs, it registers their schedule with the cron
    ``DMS_AUDIT_SEAL_CRON`` of the engine's settings (at its first tick, replacing another
    cron), and registers it again within :data:`~dms.sealing.KEEP_SCHEDULED_SECONDS` whenever
    it went missing (its tenant was dropped); ``off`` leaves the schedule alone. :meth:`start`
    refuses a value croniter does not read (:class:`~dms.errors.ValidationError`).
    """

    unit_type = UnitOfWork
    async_unit_type = AsyncUnitOfWork
    _seal_cron: str | None = None
    _sealing_checked: float | None = None

    @classmethod
    def default_unit_of_work(cls, engine: Engine) -> UnitOfWorkFactory[UnitOfWork]:
        """Lazy tenant units of work of ``engine``, settings resolved once."""
        return UnitOfWork.factory(engine)

    @classmethod
    def default_async_unit_of_work(cls, engine: AsyncEngine) -> UnitOfWorkFactory[Any]:
        """Lazy :class:`~dms.aio.AsyncUnitOfWork` of ``engine`` for ``async def`` handlers."""
        return AsyncUnitOfWork.factory(engine)

    def start(self) -> None:
        """Read the sealing cron (refused if bad, before anything runs), then start."""
        if SWEEP_AUDIT_TRAILS in self.kinds:
            self._seal_cron = check_seal_cron(settings_of(self._engine).audit_seal_cron)
        super().start()

    def on_tick(self, conn: Connection) -> None:
        """Keep the sweeps' schedule registered, checked every ``KEEP_SCHEDULED_SECONDS``."""
        if self._seal_cron is None:
            return
        now = time.monotonic()
        last = self._sealing_checked
        if last is not None and now - last < KEEP_SCHEDULED_SECONDS:
            return
        keep_sealing_scheduled(conn, self._seal_cron, replace=last is None)
        self._sealing_checked = now
