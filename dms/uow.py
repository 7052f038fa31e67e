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
(docs/audit.md), and access control reads the same (docs/access.md).

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
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dms import citus, roles
from dms.config import Settings, settings_of
from dms.domain.audit import ACTOR_SETTING, CONTEXT_SETTING, WORKER, actor_setting, check_context
from dms.domain.validation import check_optional_id
from dms.repositories import (
    AccessRepository,
    AuditRepository,
    BlobRepository,
    DocumentRepository,
    FolderRepository,
    ImportRepository,
    MetadataRepository,
    RevisionRepository,
    SearchRepository,
    TagRepository,
)
from dms.repositories._base import Repository
from dms.transaction import TenantTransaction

_R = TypeVar("_R", bound=Repository)
#: What :meth:`UnitOfWork.factory` returns: ``make(tenant=...)``.
_Factory = Callable[..., "UnitOfWork"]

log = logging.getLogger(__name__)


class UnitOfWork(TenantTransaction):
    """A tenant-routed transaction that rolls back unless :meth:`commit` is called.

    A :class:`~dms.transaction.TenantTransaction` with the tenant's repositories, and who acts
    named in every transaction it begins.
    """

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
        super().__init__(engine, tenant=tenant, settings=settings, lazy=lazy)
        self.user_id = check_optional_id("user", user_id)
        self.system = system
        self._actor = actor_setting(self.user_id, system)
        self._context = check_context(context)
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

    def _began(self, conn: Connection) -> None:
        # On Citus even a unit of work that names nobody sets the transaction up (_act_as): its
        # searches call the tenant's functions, which read the tenant's tables from its node.
        if self._actor is not None or self._context is not None or citus.is_citus(conn):
            _act_as(conn, self._actor, self._context)
        if self.user_id is not None:
            # Acting as a user on a connection the policies do not hold would show the user
            # what they may not see: said once per engine (database and role), in the log.
            roles.warn_once_if_unprotected(conn)

    def _ended(self) -> None:
        self._repositories.clear()

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
    def access(self) -> AccessRepository:
        """Who may do what: groups, members, access entries, owners, inheritance."""
        return self._repository(AccessRepository)

    @property
    def audit(self) -> AuditRepository:
        """The tenant's audit trail: a document's history, events by actor, action and time."""
        return self._repository(AuditRepository)

    @property
    def search(self) -> SearchRepository:
        """The tenant's content search: its settings, extracted texts and index."""
        return self._repository(SearchRepository)

    @property
    def blobs(self) -> BlobRepository:
        """The tenant's blob registry: which content keys its revisions hold (:mod:`dms.blobs`)."""
        return self._repository(BlobRepository)

    @property
    def imports(self) -> ImportRepository:
        """Where the tenant's imported documents came from (:mod:`dms.importing`)."""
        return self._repository(ImportRepository)

    def _repository(self, kind: type[_R]) -> _R:
        # Created on first use and only while open: a repository never outlives its connection.
        connection = self.connection
        if kind not in self._repositories:
            self._repositories[kind] = kind(
                connection, tenant=self.tenant, user_id=self.user_id, system=self.system
            )
        return self._repositories[kind]  # type: ignore[return-value]


def _act_as(conn: Connection, actor: str | None, context: str | None) -> None:
    """Name who acts, and the caller's context, for this transaction only (and turn JIT off).

    Transaction-local (``set_config(..., true)``, ``SET LOCAL`` on Citus), so nothing outlives
    the unit of work on a pooled connection or behind PgBouncer in transaction mode. On Citus a
    ``set_config`` stays on the coordinator, while the triggers that read it run on the node
    that holds the tenant: there it is ``SET LOCAL``, which Citus replays on that node.
    """
    # JIT off: the policies price their row rules as if each ran for every row (the probe of a
    # document's own scope runs only for the few documents with entries of their own), which
    # lifts a large read's estimate over the JIT thresholds, where compiling costs a large share
    # of a first page's time (docs/access.md; the figure in bench/README.md).
    settings = {ACTOR_SETTING: actor or "", CONTEXT_SETTING: context or "", "jit": "off"}
    # On Citus a policy is a function of the row (named in its comment in dms/schema/sql/access.sql)
    # that reads the tenant's access tables, and so are the searches' functions
    # (dms/schema/sql/search.sql); run on the node of a shard, that read is a query nested in a
    # query on a shard, which Citus refuses unless allowed. It is correct here: every table it reads
    # is in the same tenant schema, whole on that node, so the nested read never leaves it.
    on_citus = {**settings, "citus.allow_nested_distributed_execution": "on"}
    if citus.set_local_on_every_node(conn, on_citus):
        return
    conn.execute(sa.select(*(sa.func.set_config(n, v, True) for n, v in settings.items())))
