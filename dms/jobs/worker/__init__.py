"""Workers that run jobs in the current process, made of small parts with one job each.

::

    worker = Worker(engine, {"revision.checksum": verify_checksum}, WorkerConfig(concurrency=4))
    worker.run_until_stopped()        # blocks; SIGTERM or SIGINT stop it gracefully

The parts, one module each, wired by :class:`Worker` (``docs/jobs.md`` draws them):

* :mod:`._window` and :mod:`._book`: the **claim window** (how many jobs to hold ahead of
  the runners: Little's law) and the book of held **claims**, each tracked by a token unique
  per claim, never by the job id alone;
* :mod:`._claimer`: two **claimers** fill the runners' queue, one claim statement per batch,
  and take back expired leases;
* :mod:`._runner`: ``concurrency`` **runners** run one job each, its handler inside the unit of
  work made for the job's tenant (:mod:`.unit`: a protocol and a factory, since ``dms.jobs``
  sits below :mod:`dms.uow`); :mod:`._settler` records failures and releases, fenced;
* :mod:`._loop`: for ``async def`` handlers, one **loop runner** instead: ``concurrency`` jobs
  at once on one event loop, each in an async unit of work, with the runners' guarantees;
* :mod:`._completer`: the **batch completer** completes the jobs whose handlers wrote nothing,
  many per statement;
* :mod:`._renewer`: the **lease renewer** (heartbeat) extends the leases of held claims;
* :mod:`._wakeup`: the **wake-up listener** (``LISTEN``) wakes the claimers when jobs are
  enqueued, while polling keeps working without it;
* :mod:`._ticker`: the **ticker** enqueues the due ticks of periodic jobs and announces the
  worker and its kinds;
* :mod:`._supervisor`: **supervision**: a part that fails, whatever the exception, is logged
  with its traceback, counted (:mod:`.stats`), salvages the job it held, and is replaced.

The parts' modules (and :mod:`._arguments`, :mod:`._session`) start with an underscore: they are
internal. The package's API is what it exports: :class:`Worker`, its :class:`WorkerConfig`
(:mod:`.config`), the handler and unit-of-work protocols and factories, plain and async
(:mod:`.unit`), and :class:`WorkerStats`.

Database errors in the worker's own statements (a connection killed by
``pg_terminate_backend``, a failover) are logged and retried with a fresh pooled connection.
Create the engine with ``pool_pre_ping=True`` so that dead pooled connections are replaced
before use.
"""

from dms.jobs.worker._runner import AsyncHandler, Handler
from dms.jobs.worker.config import BATCH_SIZE, GRACE_SECONDS, POLL_SECONDS, PREFETCH, WorkerConfig
from dms.jobs.worker.stats import WorkerStats
from dms.jobs.worker.unit import (
    AsyncJobUnitOfWork,
    AsyncTenantTransaction,
    AsyncUnitOfWorkFactory,
    JobUnitOfWork,
    TenantTransaction,
    UnitOfWorkFactory,
)
from dms.jobs.worker.worker import Worker

__all__ = [
    "BATCH_SIZE",
    "GRACE_SECONDS",
    "POLL_SECONDS",
    "PREFETCH",
    "AsyncHandler",
    "AsyncJobUnitOfWork",
    "AsyncTenantTransaction",
    "AsyncUnitOfWorkFactory",
    "Handler",
    "JobUnitOfWork",
    "TenantTransaction",
    "UnitOfWorkFactory",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
]
