"""The document layer's :class:`DocumentWorker`: handlers run in the tenant :class:`UnitOfWork`.

:class:`dms.jobs.Worker` sits below the repositories and defaults to a bare
:class:`~dms.jobs.worker.TenantTransaction`; this is the same worker one layer up, where the
unit of work of a job, unless another factory is given, is ``UnitOfWork.factory(engine)``
(lazy: a handler that never touches the database opens no connection).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from dms import jobs
from dms.jobs.worker import UnitOfWorkFactory
from dms.uow import UnitOfWork


class DocumentWorker(jobs.Worker[UnitOfWork]):
    """A :class:`dms.jobs.Worker` whose handlers get the job tenant's :class:`UnitOfWork`.

    ``handler(uow, job)`` reads and writes through ``uow.documents``, ``uow.metadata`` and
    the rest; the worker commits the unit when the handler returns, rolls it back when it
    raises. Arguments as :class:`dms.jobs.Worker`.
    """

    unit_type = UnitOfWork

    @classmethod
    def default_unit_of_work(cls, engine: Engine) -> UnitOfWorkFactory[UnitOfWork]:
        """Lazy tenant units of work of ``engine``, settings resolved once."""
        return UnitOfWork.factory(engine)
