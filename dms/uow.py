"""The unit of work: one connection, one transaction, routed to one tenant.

::

    with UnitOfWork(engine, tenant="acme", user_id=alice) as uow:
        folder = uow.folders.add(name="Invoices")   # repositories hang off uow,
        doc = uow.documents.add(title="March.pdf", folder_id=folder.id)  # all on one connection
        uow.commit()             # without this, everything rolls back

Who acts is named once, for the whole transaction: ``user_id=`` (a user of the IAM) or
``system=`` (a named system principal; the job worker's units of work are ``worker``), with an
optional ``context=`` (a request id, a client address). The database reads them from
transaction-local settings (:func:`_act_as`): the audit trail records them with every change
(docs/audit.md), and access control will read the same (docs/architecture.md).

Single use. Nested work goes in :meth:`UnitOfWork.savepoint`. Jobs enqueued through the unit
of work (``dms.jobs.enqueue(uow, ...)``) commit or roll back with the business data.

A tenant name is checked when the unit of work is made (:class:`~dms.errors.InvalidTenantName`);
whether the tenant exists is not asked up front, which would cost every unit of work a round
trip: the first repository statement on a tenant that does not exist raises
:class:`~dms.errors.TenantNotFound` (see :meth:`dms.repositories._base.Repository._execute`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, Transaction

from dms import citus, tenancy
from dms.config import Settings, settings_of
from dms.domain.audit import ACTOR_SETTING, CONTEXT_SETTING, WORKER, actor_setting, check_context
from dms.domain.validation import check_optional_id, shown
from dms.errors import ConfigurationError, DmsError
from dms.repositories import (
    AuditRepository,
    DocumentRepository,
    FolderRepository,
    MetadataRepository,
    RevisionRepository,
    SearchRepository,
    TagRepository,
)
from dms.repositories._base import Repository

_R = TypeVar("_R", bound=Repository)
#: What :meth:`UnitOfWork.factory` returns: ``make(tenant=...)``.
_Factory = Callable[..., "UnitOfWork"]

log = logging.getLogger(__name__)


class UnitOfWork:
    """A tenant-routed transaction that rolls back unless :meth:`commit` is called."""

    def __init__(
        self,
        engine: Engine,
        *,
        tenant: str,
        user_id: uuid.UUID | None = None,
        system: str | None = None,
        context: Mapping[str, object] | None = None,
        settings: Settings | None = None,
        lazy: bool = False,
    ) -> None:
        """Prepare a unit of work; nothing touches the database before ``with``.

        Who acts: the user ``user_id`` (of the IAM), or the named system principal ``system``
        (``"worker"``, ``"operator"``, a name of the application's), never both; the audit
        trail records it with every change (docs/audit.md), and ``context`` (a request id, a
        client address: :func:`dms.domain.audit.check_context` says what it may hold) with it.
        ``settings`` default to those that ``engine`` carries (:func:`dms.config.settings_of`).
        ``lazy``: take the connection only when it is first used, not at ``with`` (a job
        handler that never touches the database then costs no pool checkout).
        """
        self.tenant = tenancy.validate_slug(tenant)
        self.user_id = check_optional_id("user", user_id)
        self.system = system
        self._actor = actor_setting(self.user_id, system)
        self._context = check_context(context)
        if settings is not None and not isinstance(settings, Settings):
            raise ConfigurationError(f"settings must be a dms.Settings, not {shown(settings)}")
        self._engine = engine
        self._settings = settings if settings is not None else settings_of(engine)
        self._conn: Connection | None = None
        self._transaction: Transaction | None = None
        self._used = False
        self._lazy = lazy
        self._entered = False
        self._repositories: dict[type[Repository], Repository] = {}

    @classmethod
    def factory(
        cls, engine: Engine, *, settings: Settings | None = None, system: str = WORKER
    ) -> _Factory:
        """Make lazy units of work of ``engine`` by tenant: a worker's ``unit_of_work``.

        They act as the system principal ``system``. ``settings`` are resolved once here, not
        per job.
        """
        resolved = settings if settings is not None else settings_of(engine)
        actor_setting(None, system)  # refused here, not at the first job

        def make(*, tenant: str) -> UnitOfWork:
            return cls(engine, tenant=tenant, system=system, settings=resolved, lazy=True)

        return make

    def __enter__(self) -> UnitOfWork:
        """Open the connection and begin the transaction (``lazy``: at first use)."""
        if self._used:
            raise DmsError("a UnitOfWork is single-use; create a new one")
        self._used = True
        self._entered = True
        if not self._lazy:
            self._open()
        return self

    def _open(self) -> None:
        conn = self._engine.connect()
        self._conn = tenancy.route(conn, self.tenant, self._settings)
        self._transaction = self._conn.begin()
        if self._actor is not None or self._context is not None:
            _act_as(self._conn, self._actor, self._context)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Roll back whatever was not committed, and give the connection back.

        When the block raised, a rollback that fails as well (its connection died, say) is
        logged and the block's exception goes on: it is the cause, and the caller must see it.
        """
        try:
            self._end()
        except Exception:
            if exc is None:
                raise
            log.warning(
                "unit of work of tenant %r: rolling back after %s failed too",
                self.tenant,
                type(exc).__name__,
                exc_info=True,
            )

    def _end(self) -> None:
        try:
            if self._transaction is not None and self._transaction.is_active:
                self._transaction.rollback()
        finally:
            if self._conn is not None:
                self._conn.close()
            self._transaction = None
            self._entered = False
            self._repositories.clear()

    @property
    def opened(self) -> bool:
        """Whether the connection was opened (a lazy unit opens it at first use)."""
        return self._conn is not None

    @property
    def connection(self) -> Connection:
        """The routed connection; only inside ``with``."""
        if self._conn is None and self._entered:
            self._open()
        if self._conn is None or self._transaction is None:
            raise DmsError("the UnitOfWork is not open: use it in a with block")
        return self._conn

    def commit(self) -> None:
        """Commit everything done in this unit of work; it is closed for writes afterwards."""
        if self._transaction is None or not self._transaction.is_active:
            raise DmsError("nothing to commit: the UnitOfWork is not open")
        self._transaction.commit()

    def rollback(self) -> None:
        """Throw away everything done in this unit of work."""
        if self._transaction is not None and self._transaction.is_active:
            self._transaction.rollback()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Run a block in a savepoint: an error inside it undoes only the block."""
        with self.connection.begin_nested():
            yield

    @property
    def documents(self) -> DocumentRepository:
        """Documents of the tenant."""
        return self._repository(DocumentRepository)

    @property
    def revisions(self) -> RevisionRepository:
        """File revisions of the tenant's documents."""
        return self._repository(RevisionRepository)

    @property
    def folders(self) -> FolderRepository:
        """Folders of the tenant."""
        return self._repository(FolderRepository)

    @property
    def tags(self) -> TagRepository:
        """Tags of the tenant and their links to documents."""
        return self._repository(TagRepository)

    @property
    def metadata(self) -> MetadataRepository:
        """Metadata fields, options and values of the tenant."""
        return self._repository(MetadataRepository)

    @property
    def audit(self) -> AuditRepository:
        """The tenant's audit trail: a document's history, events by actor, action and time."""
        return self._repository(AuditRepository)

    @property
    def search(self) -> SearchRepository:
        """The tenant's content search: its settings, extracted texts and index."""
        return self._repository(SearchRepository)

    def _repository(self, kind: type[_R]) -> _R:
        # Created on first use and only while open: a repository never outlives its connection.
        connection = self.connection
        if kind not in self._repositories:
            self._repositories[kind] = kind(connection, tenant=self.tenant, user_id=self.user_id)
        return self._repositories[kind]  # type: ignore[return-value]


def _act_as(conn: Connection, actor: str | None, context: str | None) -> None:
    """Name who acts, and the caller's context, for this transaction only.

    Transaction-local (``set_config(..., true)``, ``SET LOCAL`` on Citus), so nothing outlives
    the unit of work on a pooled connection or behind PgBouncer in transaction mode. On Citus a
    ``set_config`` stays on the coordinator, while the triggers that read it run on the node
    that holds the tenant: there it is ``SET LOCAL``, which Citus replays on that node.
    """
    settings = {ACTOR_SETTING: actor or "", CONTEXT_SETTING: context or ""}
    if citus.set_local_on_every_node(conn, settings):
        return
    conn.execute(sa.select(*(sa.func.set_config(n, v, True) for n, v in settings.items())))
