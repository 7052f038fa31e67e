"""``dms worker`` and ``dms jobs enqueue|show|list|cancel|stats|dead|requeue|prune``.

The schedules' commands (``dms jobs schedules|schedule|unschedule``) are in
:mod:`dms.cli.schedules`, the limits' (``dms jobs limits|limit|unlimit``) in :mod:`dms.cli.limits`.
"""

from __future__ import annotations

import argparse
import gc
import json
import uuid
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy.engine import Connection, Engine

from dms import jobs, tenancy
from dms.cli.apps import load_apps
from dms.cli.arguments import (
    add_blobs_option,
    duration,
    job_state,
    json_value,
    moment,
    port,
    positive,
)
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.health import add_address_option, metrics_module
from dms.cli.limits import register as register_limits
from dms.cli.output import add_json_flag, confirmed, emit_json, tell
from dms.cli.schedules import register as register_schedules
from dms.health import require_migrated
from dms.jobs import Job, JobState, WorkerConfig
from dms.jobs.enqueue import DEFAULT_MAX_ATTEMPTS
from dms.jobs.model import CANCELLABLE_STATES
from dms.worker import DocumentWorker


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``worker`` and ``jobs`` with its subcommands to ``commands``."""
    _register_worker(commands)
    job_parser = commands.add_parser("jobs", help="inspect and repair the job queue")
    job_commands = job_parser.add_subparsers(dest="jobs_command", required=True)
    enqueue = job_commands.add_parser("enqueue", help="enqueue one job")
    enqueue.add_argument("kind", help="the job's kind, e.g. revision.verify")
    enqueue.add_argument("--tenant", required=True, help="the tenant the job works for")
    enqueue.add_argument(
        "--payload", type=json_value, default={}, help="the payload as JSON (default {})"
    )
    enqueue.add_argument("--idempotency-key", help="enqueue at most once per (tenant, kind, key)")
    enqueue.add_argument("--run-at", type=moment, help="not before this ISO 8601 time")
    enqueue.add_argument("--priority", type=int, default=0, help="smaller runs first (0)")
    enqueue.add_argument(
        "--max-attempts", type=positive, help=f"claims before it goes dead ({DEFAULT_MAX_ATTEMPTS})"
    )
    add_json_flag(enqueue)
    enqueue.set_defaults(run=_enqueue)
    show = job_commands.add_parser("show", help="one job with its error history")
    show.add_argument("job_id", type=uuid.UUID, help="the job's id")
    add_json_flag(show)
    show.set_defaults(run=_show)
    _register_operations(job_commands)
    register_schedules(job_commands)
    register_limits(job_commands)
    stats = job_commands.add_parser("stats", help="counts by tenant, kind and state")
    stats.add_argument("--kind", help="only jobs of this kind")
    stats.add_argument("--tenant", help="only jobs of this tenant")
    add_json_flag(stats)
    stats.set_defaults(run=_stats)
    dead = job_commands.add_parser("dead", help="list dead jobs, most recent first")
    _filters(dead)
    dead.add_argument("--limit", type=positive, default=100, help="at most this many (100)")
    add_json_flag(dead)
    dead.set_defaults(run=_dead)
    requeue = job_commands.add_parser("requeue", help="put dead jobs back in the queue")
    requeue.add_argument("job_id", nargs="?", type=uuid.UUID, help="one dead job")
    requeue.add_argument("--dead", action="store_true", help="every dead job matching filters")
    _filters(requeue)
    _bulk_flags(requeue, "requeue")
    requeue.set_defaults(run=_requeue)
    prune = job_commands.add_parser("prune", help="delete old finished jobs and expired keys")
    prune.add_argument(
        "--older-than",
        type=duration,
        default=timedelta(days=7),
        help="finished at least this long ago (default 7d)",
    )
    prune.add_argument(
        "--include-dead", action="store_true", help="dead jobs too (needs --yes: no requeue then)"
    )
    prune.add_argument("--dry-run", action="store_true", help="only count what would go")
    prune.add_argument("--yes", action="store_true", help="confirm that dead jobs go")
    prune.set_defaults(run=_prune)


def _register_worker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``worker``: job threads in this process, with their blob store and metrics."""
    worker = commands.add_parser("worker", help="process jobs until SIGTERM or Ctrl-C")
    worker.add_argument("--concurrency", type=positive, default=1, help="threads (default 1)")
    worker.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="MODULE:ATTRIBUTE",
        help="also the job handlers and schedules of this app: a dms.jobs.App, a mapping of "
        "kinds to handlers, or a callable taking the blob store that returns either "
        "(repeatable; dms's own handlers always run)",
    )
    worker.add_argument("--kinds", nargs="+", help="only these job kinds (each needs a handler)")
    worker.add_argument("--lease", type=positive, default=30, help="lease in seconds (default 30)")
    add_blobs_option(worker)
    worker.add_argument(
        "--metrics-port",
        type=port,
        help="also serve the queue's Prometheus metrics on this port (dms[metrics])",
    )
    add_address_option(worker, "--metrics-address")
    worker.set_defaults(run=_worker)


def _register_operations(
    job_commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """``jobs list`` and ``jobs cancel``."""
    listing = job_commands.add_parser("list", help="jobs, most recent first")
    listing.add_argument(
        "--state",
        type=job_state,
        help=f"only jobs in this state: one of {', '.join(state.value for state in JobState)} "
        "(default: every state)",
    )
    listing.add_argument("--tenant", help="only jobs of this tenant")
    listing.add_argument("--kind", help="only jobs of this kind")
    listing.add_argument("--limit", type=positive, default=100, help="at most this many (100)")
    add_json_flag(listing)
    listing.set_defaults(run=_list)
    cancel = job_commands.add_parser(
        "cancel", help="cancel a queued, running or dead job, or every one matching filters"
    )
    cancel.add_argument(
        "job_id",
        nargs="?",
        type=uuid.UUID,
        help="the job's id; a running attempt is not interrupted but can no longer complete",
    )
    cancel.add_argument("--tenant", help="every unfinished job of this tenant")
    cancel.add_argument("--kind", help="every unfinished job of this kind")
    cancel.add_argument(
        "--state",
        action="append",
        choices=CANCELLABLE_STATES,
        help="only jobs in this state (repeatable; default: queued, running and dead)",
    )
    cancel.add_argument("--older-than", type=duration, help="only jobs created this long ago")
    _bulk_flags(cancel, "cancel")
    add_json_flag(cancel)
    cancel.set_defaults(run=_cancel)


def _bulk_flags(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--dry-run", action="store_true", help=f"only count what would {verb}")
    parser.add_argument("--yes", action="store_true", help=f"confirm the jobs {verb} by filter")


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", help="only jobs of this kind")
    parser.add_argument("--tenant", help="only jobs of this tenant")
    parser.add_argument("--older-than", type=duration, help="only jobs dead for this long")


def _require_tenant(conn: Connection, tenant: str | None) -> None:
    """A filter on a tenant that does not exist is a mistake, not an empty result."""
    if tenant is not None:
        tenancy.get_tenant(conn, tenant)


#: Connections a Worker holds beside its runners' (docs/jobs.md, "Running workers in
#: production"): two claimers, the completer, the renewer, the ticker, one settling.
WORKER_EXTRA_CONNECTIONS = 6


def worker_engine(ctx: Context, concurrency: int) -> Engine:
    """The engine of ``dms worker``: a connection per thread, dead connections replaced."""
    return ctx.engine_with(pool_size=concurrency + WORKER_EXTRA_CONNECTIONS, pool_pre_ping=True)


def _worker(ctx: Context, args: argparse.Namespace) -> int:
    engine = worker_engine(ctx, args.concurrency)
    with engine.connect() as conn:
        # Without its table a worker would retry its claims forever.
        require_migrated(conn)
    app = load_apps(args.app, ctx.store(args.blobs))
    worker = DocumentWorker(
        engine,
        app.handlers,
        WorkerConfig(
            schedules=app.schedules,
            concurrency=args.concurrency,
            kinds=args.kinds or None,
            lease=timedelta(seconds=args.lease),
        ),
    )
    if args.metrics_port is not None:
        metrics = metrics_module()
        collector = metrics.WorkerCollector(worker.name, worker.stats)
        metrics.serve(engine, args.metrics_port, address=args.metrics_address, worker=collector)
    print(f"worker {worker.name}: {args.concurrency} thread(s); SIGTERM or Ctrl-C stops it")
    # Everything this process needs is loaded: keep the collector's full passes off those
    # objects (docs/jobs.md, "Running workers in production").
    gc.collect()
    gc.freeze()
    worker.run_until_stopped()
    print("worker stopped")
    return EXIT_OK


def _enqueue(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.begin() as conn:
        result = jobs.enqueue(
            conn,
            args.kind,
            args.payload,
            tenant=args.tenant,
            idempotency_key=args.idempotency_key,
            run_at=args.run_at,
            priority=args.priority,
            max_attempts=args.max_attempts,
        )
    if args.json:
        emit_json({"job_id": result.job_id, "created": result.created})
    else:
        print(f"{'enqueued' if result.created else 'already enqueued'} job {result.job_id}")
    return EXIT_OK


def _show(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.connect() as conn:
        job = jobs.get(conn, args.job_id)
    if args.json:
        emit_json(job)
        return EXIT_OK
    lease = "" if job.lease_expires_at is None else f", lease until {job.lease_expires_at}"
    print(f"job {job.id}: {job.kind} for tenant {job.tenant}")
    print(f"state {job.state.value}, attempt {job.attempts} of {job.max_attempts}{lease}")
    print(f"created {job.created_at}, runs at {job.run_at}, finished {job.finished_at or '-'}")
    print(f"payload {json.dumps(job.payload)}")
    for entry in job.errors:
        print(f"attempt {entry.get('attempt')} at {entry.get('at')}: {entry.get('error')}")
    if job.last_error:
        print(f"last error:\n{job.last_error}")
    return EXIT_OK


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.connect() as conn:
        _require_tenant(conn, args.tenant)
        found = jobs.list_jobs(
            conn, state=args.state, tenant=args.tenant, kind=args.kind, limit=args.limit
        )
    if args.json:
        emit_json({"jobs": found})
        return EXIT_OK
    _print_jobs(found)
    print(f"{len(found)} {'' if args.state is None else f'{args.state} '}job(s) shown")
    return EXIT_OK


def _cancel(ctx: Context, args: argparse.Namespace) -> int:
    filtered = any(f is not None for f in (args.tenant, args.kind, args.state, args.older_than))
    if (args.job_id is None) != filtered:
        tell("error: give a job id, or filters: --tenant, --kind, --state, --older-than")
        return EXIT_ERROR
    if filtered:
        return _by_filter(ctx, args, ("cancel", "cancelled"), _cancelled)
    if _bulk_flags_given(args):
        return EXIT_ERROR
    with ctx.engine.begin() as conn:
        before = jobs.get(conn, args.job_id)
        job = jobs.cancel(conn, args.job_id)
    if args.json:
        emit_json(job)
    elif before.state is JobState.CANCELLED:
        print(f"job {job.id} was already cancelled")
    elif before.state is JobState.RUNNING:
        print(
            f"cancelled job {job.id}; its running attempt (worker {before.locked_by}) "
            "can no longer complete"
        )
    else:
        print(f"cancelled job {job.id} (was {before.state.value})")
    return EXIT_OK


def _stats(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.connect() as conn:
        _require_tenant(conn, args.tenant)
        stats = jobs.stats(conn, tenant=args.tenant, kind=args.kind)
    if args.json:
        emit_json(stats)
        return EXIT_OK
    for count in stats.counts:
        print(f"{count.tenant}\t{count.kind}\t{count.state.value}\t{count.count}")
    age = stats.oldest_queued_age
    waited = "-" if age is None else f"{age.total_seconds():.1f} s"
    print(f"total {stats.total()}; dead {stats.dead}; oldest queued waiting {waited}")
    return EXIT_OK


def _print_jobs(found: list[Job]) -> None:
    for job in found:
        error = (job.last_error or "").splitlines()[-1:] or [""]
        print(f"{job.id}\t{job.tenant}\t{job.kind}\t{job.state.value}\t{job.attempts}\t{error[0]}")


def _dead(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.engine.connect() as conn:
        _require_tenant(conn, args.tenant)
        found = jobs.dead_letter(
            conn, kind=args.kind, tenant=args.tenant, older_than=args.older_than, limit=args.limit
        )
    if args.json:
        emit_json({"jobs": found})
        return EXIT_OK
    _print_jobs(found)
    print(f"{len(found)} dead job(s) shown")
    return EXIT_OK


def _requeue(ctx: Context, args: argparse.Namespace) -> int:
    if (args.job_id is None) == (not args.dead):
        tell("error: give a job id, or --dead with optional filters")
        return EXIT_ERROR
    if args.dead:
        return _by_filter(ctx, args, ("requeue", "requeued"), _requeued)
    if _bulk_flags_given(args):
        return EXIT_ERROR
    with ctx.engine.begin() as conn:
        moved = [jobs.requeue_dead_letter(conn, args.job_id)]
    _print_jobs(moved)
    print(f"requeued {len(moved)} job(s)")
    return EXIT_OK


def _bulk_flags_given(args: argparse.Namespace) -> bool:
    """Whether ``--dry-run`` or ``--yes`` came with one job id (said, and nothing done).

    A ``--dry-run`` ignored would change the job it was meant to spare.
    """
    if args.dry_run or args.yes:
        tell("error: --dry-run and --yes go with filters; one job id is changed as it is")
        return True
    return False


def _cancelled(conn: Connection, args: argparse.Namespace) -> list[Job]:
    return jobs.cancel_matching(
        conn, tenant=args.tenant, kind=args.kind, states=args.state, older_than=args.older_than
    )


def _requeued(conn: Connection, args: argparse.Namespace) -> list[Job]:
    return jobs.requeue_dead_letters(
        conn, kind=args.kind, tenant=args.tenant, older_than=args.older_than
    )


def _by_filter(
    ctx: Context,
    args: argparse.Namespace,
    verbs: tuple[str, str],
    change: Callable[[Connection, argparse.Namespace], list[Job]],
) -> int:
    """Change the jobs a filter matches: counted first (the change rolled back), then done.

    Without ``--yes`` (or ``yes`` typed on a terminal) nothing changes; ``--dry-run`` counts.
    """
    verb, done = verbs
    counted = _changed(ctx, args, change, keep=False)
    if args.dry_run:
        _report_bulk(args, f"would {verb}", counted, dry_run=True)
        return EXIT_OK
    if counted and not confirmed(args, f"{verb} {len(counted)} job(s){_scope_of(args)}"):
        return EXIT_ERROR
    _report_bulk(args, done, _changed(ctx, args, change, keep=True), dry_run=False)
    return EXIT_OK


def _changed(
    ctx: Context,
    args: argparse.Namespace,
    change: Callable[[Connection, argparse.Namespace], list[Job]],
    *,
    keep: bool,
) -> list[Job]:
    """The jobs ``change`` changed, committed if ``keep``, else rolled back: an exact count."""
    with ctx.engine.connect() as conn, conn.begin() as transaction:
        _require_tenant(conn, args.tenant)
        changed = change(conn, args)
        if not keep:
            transaction.rollback()
    return changed


def _scope_of(args: argparse.Namespace) -> str:
    parts = [
        f"{name} {value}"
        for name, value in (
            ("of tenant", args.tenant),
            ("of kind", args.kind),
            ("in state", None if not getattr(args, "state", None) else "/".join(args.state)),
            ("older than", args.older_than),
        )
        if value is not None
    ]
    return "" if not parts else " " + ", ".join(parts)


def _report_bulk(args: argparse.Namespace, done: str, changed: list[Job], *, dry_run: bool) -> None:
    if getattr(args, "json", False):
        emit_json({"dry_run": dry_run, "count": len(changed), "jobs": changed})
        return
    if not dry_run:
        _print_jobs(changed)
    print(f"{done} {len(changed)} job(s){_scope_of(args)}")


def _prune(ctx: Context, args: argparse.Namespace) -> int:
    # Finished jobs past retention are history, pruned from cron without a question; dead
    # ones could still be requeued, so deleting them is a destruction to confirm.
    if args.include_dead and not args.dry_run:
        counted = _pruned(ctx, args, keep=False)
        if not confirmed(args, f"delete {counted.jobs} finished or dead job(s) for good"):
            return EXIT_ERROR
    result = _pruned(ctx, args, keep=not args.dry_run)
    verb = "pruned" if not args.dry_run else "would prune"
    print(f"{verb} {result.jobs} job(s) and {result.idempotency_keys} expired idempotency key(s)")
    return EXIT_OK


def _pruned(ctx: Context, args: argparse.Namespace, *, keep: bool) -> jobs.PruneResult:
    """Prune, committed if ``keep``, else rolled back: exact counts of what would go."""
    with ctx.engine.connect() as conn, conn.begin() as transaction:
        result = jobs.prune(conn, older_than=args.older_than, include_dead=args.include_dead)
        if not keep:
            transaction.rollback()
    return result
