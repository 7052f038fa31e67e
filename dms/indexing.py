"""Operations on the content search's index of tenants: configuration, reindex, backfill.

The index is written by triggers and never drifts from what it indexes
(dms/schema/sql/search.sql); what these operations do is what a trigger cannot:

* :func:`set_text_search_config` changes how a tenant's text is normalised (``english`` stems
  English words, ``german`` German ones, ``simple`` only folds case and accents). The new
  configuration applies to queries at once; each document's rows are rebuilt with it by
  :func:`reindex_tenant`, which it runs. Until a document is rebuilt, it is matched by what
  both configurations make of a word (unstemmed words, for example).
* :func:`reindex` rebuilds, over many tenants and on ``jobs`` processes, the documents whose
  rows were built with another configuration than their tenant's. It commits every
  :data:`REINDEX_BATCH` documents and finds its work again from the rows themselves, so an
  interrupted run resumes where it stopped, and a finished one has nothing left to do.
* :func:`backfill_extraction` enqueues the text extraction of every document's current
  revision that has none yet: revisions uploaded before the tenant's schema had the index, or
  whose job was pruned. Jobs are idempotent by revision, so running it twice, or while workers
  run, enqueues each revision once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from dms import jobs, tenancy
from dms.domain.audit import OPERATOR
from dms.errors import FleetInterrupted, FleetStopped, ValidationError
from dms.fleet.arguments import Jobs, check_jobs
from dms.fleet.pool import run_each
from dms.fleet.progress import NoProgress, Progress
from dms.fleet.report import FleetReport, Outcome, TenantReport, stopped_message
from dms.fleet.sizing import worker_processes
from dms.services import extraction_jobs
from dms.uow import UnitOfWork

#: Documents rebuilt per transaction.
REINDEX_BATCH = 200
#: Extraction jobs enqueued per transaction.
BACKFILL_BATCH = 1000


@dataclass(frozen=True, kw_only=True)
class Reindexed:
    """What :func:`reindex_tenant` did."""

    tenant: str
    documents: int
    config: str


def set_text_search_config(engine: Engine, tenant: str, name: str) -> Reindexed:
    """Make ``name`` the text search configuration of ``tenant``, then reindex the tenant.

    :class:`~dms.errors.ValidationError` (nothing changed) for a configuration the server does
    not have; :class:`~dms.errors.TenantNotFound` for an unknown tenant.
    """
    tenancy.validate_slug(tenant)
    with UnitOfWork(engine, tenant=tenant, system=OPERATOR) as uow:
        uow.search.set_config(name)
        uow.commit()
    return reindex_tenant(engine, tenant)


def reindex_tenant(engine: Engine, tenant: str, *, batch: int = REINDEX_BATCH) -> Reindexed:
    """Rebuild the documents of ``tenant`` indexed with another configuration; how many."""
    tenancy.validate_slug(tenant)
    done = 0
    after: uuid.UUID | None = None
    while True:
        with UnitOfWork(engine, tenant=tenant, system=OPERATOR) as uow:
            stale = uow.search.stale_documents(after=after, limit=batch)
            uow.search.rebuild(stale)
            config = uow.search.config()
            uow.commit()
        done += len(stale)
        if len(stale) < batch:
            return Reindexed(tenant=tenant, documents=done, config=config)
        after = stale[-1]


def reindex(
    engine: Engine,
    tenants: Sequence[str] | None = None,
    *,
    jobs: Jobs = None,
    progress: Progress | None = None,
) -> FleetReport:
    """:func:`reindex_tenant` for ``tenants`` (default: every tenant), on ``jobs`` processes.

    Each tenant is ``reindexed`` (or ``skipped``: nothing was stale) or ``failed`` with its
    error, the others going on. Stopped by Ctrl-C, raises :class:`~dms.errors.FleetInterrupted`
    with the report; the batches committed stay done, and running it again resumes.
    """
    check_jobs(jobs)
    names = _tenants(engine, tenants)
    progress = progress or NoProgress()
    progress.begin(len(names))
    try:
        workers = worker_processes(jobs, engine, len(names))
        result = run_each(
            _reindex_task, None, names, engine=engine, jobs=workers, progress=progress
        )
    finally:
        progress.end()
    unfinished = [_report(name, Outcome.INTERRUPTED) for name in result.unsettled] + [
        _report(name, Outcome.PENDING) for name in result.pending
    ]
    report = FleetReport(
        operation="reindex",
        target=None,
        tenants=tuple(sorted([*result.reports, *unfinished], key=lambda r: r.tenant)),
        stopped=result.stopped,
    )
    if result.interrupted:
        raise FleetInterrupted(report)
    if result.stopped is not None:
        raise FleetStopped(stopped_message(report), report)
    return report


def _tenants(engine: Engine, tenants: Sequence[str] | None) -> list[str]:
    if tenants is None:
        return [tenant.slug for tenant in tenancy.list_tenants(engine)]
    if isinstance(tenants, (str, bytes)) or not isinstance(tenants, Sequence):
        raise ValidationError(f"tenants must be a sequence of names, not {type(tenants).__name__}")
    for name in tenants:
        tenancy.validate_slug(name)
    return list(tenants)


def _reindex_task(engine: Engine, _parameters: object, tenant: str) -> TenantReport:
    started = time.monotonic()
    try:
        done = reindex_tenant(engine, tenant)
    except DBAPIError as exc:
        return _report(
            tenant,
            Outcome.FAILED,
            error=f"{type(exc.orig).__name__}: {exc.orig}",
            seconds=time.monotonic() - started,
            lost_connection=exc.connection_invalidated,
        )
    except Exception as exc:  # one tenant's error is reported; the others go on
        return _report(tenant, Outcome.FAILED, error=f"{exc}", seconds=time.monotonic() - started)
    outcome = Outcome.REINDEXED if done.documents else Outcome.SKIPPED
    return _report(tenant, outcome, seconds=time.monotonic() - started)


def _report(
    tenant: str,
    outcome: Outcome,
    *,
    error: str | None = None,
    seconds: float = 0.0,
    lost_connection: bool = False,
) -> TenantReport:
    return TenantReport(
        tenant=tenant,
        from_revision=None,
        to_revision=None,
        seconds=seconds,
        outcome=outcome,
        error=error,
        lost_connection=lost_connection,
    )


def backfill_extraction(engine: Engine, tenant: str, *, batch: int = BACKFILL_BATCH) -> int:
    """Enqueue the extraction of each current revision of ``tenant`` that has no text yet.

    Returns how many jobs were created (a revision already enqueued counts once, ever).
    """
    tenancy.validate_slug(tenant)
    created = 0
    after: uuid.UUID | None = None
    while True:
        with UnitOfWork(engine, tenant=tenant, system=OPERATOR) as uow:
            revisions = uow.search.unextracted(
                uow.documents.current_revisions(), after=after, limit=batch
            )
            enqueued = jobs.enqueue_many(uow, extraction_jobs(tenant, revisions))
            uow.commit()
        created += sum(1 for job in enqueued if job.created)
        if len(revisions) < batch:
            return created
        after = revisions[-1]
