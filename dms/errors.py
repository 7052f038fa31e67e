"""Every error that ``dms`` raises on purpose.

One root, :class:`DmsError`, so that callers can catch everything of ours in one clause::

    DmsError
    ├── ConfigurationError          no database could be chosen or reached
    │   └── DatabaseUnreachable     connecting failed; says the server's reason
    ├── InvalidTenantName (ValueError)
    ├── TenantNotFound (LookupError)
    ├── MigrationError
    │   ├── NotMigrated             the shared schema's tables are not there yet
    │   ├── UsersTableMissing       the IAM's users table is not there
    │   ├── MigrationFailed         some tenants failed; carries the report
    │   └── TemplateError           tenant DDL that cannot be replayed for another schema
    │                               (in dms.migrations.template, beside what it guards)
    ├── FleetStopped                a fleet operation stopped early (server gone, worker died)
    ├── ClusterError                a Citus operation cannot run (not a cluster, unknown node)
    ├── ValidationError (ValueError) bad input caught before any SQL runs; in a job: dead at once
    ├── UnreadableContent (ValueError) a file's bytes are in a format that cannot be read
    ├── StorageError                a blob store failed (unreachable, refused, holds nothing)
    ├── NotFound (LookupError)      a referenced row does not exist, or the actor may not see it
    ├── PermissionDenied            the actor may see the object but lacks the right to change it
    ├── AlreadyExists               a unique key is taken
    │   └── TenantExists            a tenant of that name is registered
    ├── InvariantViolation          the database refused a row (CHECK, trigger)
    ├── ConcurrentUpdate            optimistic-concurrency version was stale
    ├── TransactionFailed           commit of a unit whose transaction a failed statement ended
    ├── LeaseLost                   a job's lease passed to another worker
    ├── JobFinished                 a job already done cannot be cancelled
    └── PermanentFailure            raised by a job handler: dead at once, no retry

Not an error, so outside the tree: :class:`FleetInterrupted` is the ``KeyboardInterrupt`` of a
fleet operation stopped by Ctrl-C (or SIGTERM), carrying the report of how far it got.

Database errors are translated once, by SQLSTATE and constraint name, in
:mod:`dms.driver_errors`; messages are never parsed. Its table gives the generic errors of a
refused statement (``AlreadyExists``, ``NotFound``, ``InvariantViolation``, ``ConcurrentUpdate``,
``ValidationError``); each layer names there the refusals it knows better: the repositories'
constraints (:mod:`dms.repositories`, which run their statements in savepoints through
:mod:`dms.repositories.errors`), the queue's (a dropped tenant is ``TenantNotFound``, a state
the table predates ``NotMigrated``: :mod:`dms.jobs._translation`), the registry's (missing:
``NotMigrated``, :mod:`dms.tenancy`). Made from a driver error but not translations of one:
``DatabaseUnreachable`` (a failed connect, in :mod:`dms.db`), ``TenantNotFound`` of a unit of
work (a missing table, then the registry asked: :mod:`dms.repositories._base`), the
``ClusterError`` of a failed tenant move (with where the tenant is: :mod:`dms.placement`), and
the failures that fleet operations record in their reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.exc import OperationalError

if TYPE_CHECKING:
    from dms.fleet.report import FleetReport


class DmsError(Exception):
    """Root of every error raised by ``dms``."""


class ConfigurationError(DmsError):
    """The database to use could not be determined or started."""


class DatabaseUnreachable(ConfigurationError, OperationalError):
    """Connecting to the database failed: its message is the server's or the network's reason.

    Raised by engines of :func:`dms.create_engine`. Also SQLAlchemy's ``OperationalError`` (the
    driver's error is ``orig``), so that code which retries on the driver's errors, as
    ``dms`` workers do while a server restarts, keeps doing so.
    """

    def __init__(self, message: str, orig: BaseException) -> None:
        """Say ``message``; ``orig`` is the driver's exception."""
        OperationalError.__init__(self, None, None, orig)
        self.message = message
        self.driver_error = orig

    def __str__(self) -> str:
        """The message alone, without SQLAlchemy's statement and background link."""
        return self.message

    def __reduce__(self) -> tuple[type[DatabaseUnreachable], tuple[str, BaseException]]:
        """Pickled as it was made (a fleet's worker process sends it to its parent)."""
        return type(self), (self.message, self.driver_error)


class InvalidTenantName(DmsError, ValueError):
    """A tenant key does not match ``^[a-z][a-z0-9_]{0,39}$`` or is reserved."""


class TenantNotFound(DmsError, LookupError):
    """No tenant with this key is registered."""


class MigrationError(DmsError):
    """A migration could not run."""


class NotMigrated(MigrationError):
    """The database has not been migrated: the shared schema's tables are missing."""

    def __init__(self, message: str = "the database is not migrated: run `dms migrate` first"):
        """Say what to do; the default message is the one every ``dms`` command prints."""
        super().__init__(message)


class UsersTableMissing(MigrationError):
    """The IAM service's ``users`` table, which tenant tables reference, does not exist."""


@dataclass(frozen=True, kw_only=True)
class TenantFailure:
    """One tenant whose migration failed and was rolled back."""

    tenant: str
    revision: str | None
    target: str
    error: str

    def __str__(self) -> str:
        """Describe the failure on one line."""
        return (
            f"tenant {self.tenant!r}: stayed at {self.revision or 'base'} "
            f"(target {self.target}): {self.error}"
        )


class MigrationFailed(MigrationError):
    """Some schemas failed to migrate; each was rolled back alone and the others went on."""

    def __init__(
        self, failures: Sequence[TenantFailure], report: FleetReport | None = None
    ) -> None:
        """Keep the failures (and the whole run's report) and summarise them in the message."""
        self.failures = tuple(failures)
        self.report = report
        lines = "\n".join(f"  {failure}" for failure in self.failures)
        super().__init__(f"{len(self.failures)} schema(s) failed to migrate:\n{lines}")


class FleetStopped(DmsError):
    """A fleet operation stopped before the end: the database went away, or a worker died.

    Every tenant is either done or as it was (each is one transaction); :attr:`report` says
    which, and running the same operation again finishes the rest.
    """

    def __init__(self, message: str, report: FleetReport) -> None:
        """Say why and how far; keep the report."""
        self.report = report
        super().__init__(message)


class ClusterError(DmsError):
    """A Citus operation cannot run: the database is not a Citus cluster, or no such node."""


class FleetInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a fleet operation; :attr:`report` says how far it got.

    A ``KeyboardInterrupt``, so that code catching those still does; each tenant is either
    done or as it was, and running the same operation again finishes the rest.
    """

    def __init__(self, report: FleetReport) -> None:
        """Keep the report of the run up to the interruption."""
        self.report = report
        super().__init__(f"{report.operation} interrupted")


class ValidationError(DmsError, ValueError):
    """Input was rejected before any SQL ran.

    Raised by a job handler (this class or a subclass), it fails the job for good, as a
    :class:`PermanentFailure` does: bad input never becomes good by waiting.
    """


class NotFound(DmsError, LookupError):
    """A row that the operation needs does not exist."""


class PermissionDenied(DmsError, PermissionError):
    """The acting user may view the object but lacks the right this change needs.

    Raised from the database's refusal (SQLSTATE 42501, docs/access.md). An object the actor may
    not view is :class:`NotFound` instead, so that its existence does not leak.
    """


class AlreadyExists(DmsError):
    """A row with the same unique key already exists."""


class TenantExists(AlreadyExists):
    """A tenant with this key is already registered."""


class InvariantViolation(DmsError):
    """The database refused a change that would break one of its invariants."""


class ConcurrentUpdate(DmsError):
    """The row changed since the caller read it (stale ``version``)."""


class TransactionFailed(DmsError):
    """A unit of work was committed after a statement failed in it outside a savepoint.

    PostgreSQL ends such a transaction: nothing of it can commit. Raised by ``commit()`` (after
    rolling back) instead of letting the commit pass as if the work were kept.
    """


class LeaseLost(DmsError):
    """The job's lease expired and another worker reclaimed it; nothing was changed."""


class JobFinished(DmsError):
    """The job already completed (``done``): there is nothing left to cancel."""


class UnreadableContent(DmsError, ValueError):
    """A file's bytes claim a format that cannot be read: corrupt, truncated or encrypted."""


class StorageError(DmsError):
    """A blob store failed: unreachable, refused the request, or holds none of what it should."""


class PermanentFailure(DmsError):
    """The job cannot succeed however often it is retried; it goes to the dead letter at once.

    So does a job whose handler raises a :class:`ValidationError`.
    """
