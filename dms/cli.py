"""The ``dms`` command: tenants, migrations, status, seed data, a demo, workers and the queue.

Every user error prints one line on stderr and exits with status 1 (2 for bad arguments);
a traceback means a bug.
"""

from __future__ import annotations

import argparse
import gc
import sys
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from dms import jobs, migrations, tenancy
from dms.config import Settings
from dms.db import create_engine
from dms.errors import DmsError
from dms.jobs import Job, Worker
from dms.processing import handlers
from dms.seed import DEMO_TIMEOUT_SECONDS, run_demo, seed
from dms.storage import LocalBlobStore
from dms.users import create_users_stand_in

EXIT_OK = 0
EXIT_ERROR = 1

Command = Callable[[Engine, argparse.Namespace], int]


def _tenants_create(engine: Engine, args: argparse.Namespace) -> int:
    tenant = tenancy.create_tenant(engine, args.slug)
    print(f"created tenant {tenant.slug} (schema {tenant.schema_name})")
    return EXIT_OK


def _tenants_drop(engine: Engine, args: argparse.Namespace) -> int:
    if not args.yes:
        print(f"refusing to drop {args.slug!r} and all its data without --yes", file=sys.stderr)
        return EXIT_ERROR
    tenancy.drop_tenant(engine, args.slug)
    print(f"dropped tenant {args.slug}")
    return EXIT_OK


def _tenants_list(engine: Engine, args: argparse.Namespace) -> int:
    for tenant in tenancy.list_tenants(engine):
        print(f"{tenant.slug}\t{tenant.schema_name}\t{tenant.state}\t{tenant.created_at:%Y-%m-%d}")
    return EXIT_OK


def _migrate(engine: Engine, args: argparse.Namespace) -> int:
    migrations.upgrade(engine, args.revision, tenant=args.tenant)
    print(f"migrated {args.tenant or 'shared schema and every tenant'} to {args.revision}")
    return EXIT_OK


def _downgrade(engine: Engine, args: argparse.Namespace) -> int:
    migrations.downgrade(engine, args.revision, tenant=args.tenant)
    print(f"downgraded {args.tenant or 'every tenant and the shared schema'} to {args.revision}")
    return EXIT_OK


def _status(engine: Engine, args: argparse.Namespace) -> int:
    status = migrations.fleet_status(engine)
    print(f"head: {status.head}")
    shared_note = "" if status.shared_revision == status.head else " (not at head)"
    print(f"shared schema: {status.shared_revision or 'base'}{shared_note}")
    for item in status.tenants:
        problems = [
            text
            for text, bad in (
                ("not at head", not item.at_head),
                ("schema missing", not item.schema_exists),
                ("not registered", not item.registered),
            )
            if bad
        ]
        state = ", ".join(problems) or "ok"
        print(f"{item.slug}\t{item.schema_name}\t{item.revision or 'base'}\t{state}")
    print(f"{len(status.tenants)} tenant(s); {'all at head' if status.healthy else 'ATTENTION'}")
    return EXIT_OK if status.healthy else EXIT_ERROR


def _users_stand_in(engine: Engine, args: argparse.Namespace) -> int:
    created = create_users_stand_in(engine)
    print("created the users stand-in" if created else "a users table already exists")
    return EXIT_OK


def _seed(engine: Engine, args: argparse.Namespace) -> int:
    print(seed(engine).describe())
    return EXIT_OK


def _demo(engine: Engine, args: argparse.Namespace) -> int:
    result = run_demo(engine, timeout_seconds=args.timeout)
    print(result.summary)
    if result.unfinished:
        print(
            f"error: {result.unfinished} seed job(s) still queued or running after "
            f"{args.timeout:g} s; see: dms jobs stats",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_OK


def _blob_store(args: argparse.Namespace) -> LocalBlobStore:
    root = Path(args.blobs) if args.blobs else Settings.from_env().data_dir / "blobs"
    return LocalBlobStore(root)


def _worker(engine: Engine, args: argparse.Namespace) -> int:
    worker = Worker(
        engine,
        handlers(_blob_store(args)),
        concurrency=args.concurrency,
        kinds=args.kinds or None,
        lease=timedelta(seconds=args.lease),
    )
    print(f"worker {worker.name}: {args.concurrency} thread(s); SIGTERM or Ctrl-C stops it")
    # Everything this process needs is loaded: keep the collector's full passes off those
    # objects (docs/jobs.md, "Running workers in production").
    gc.collect()
    gc.freeze()
    worker.run_until_stopped()
    print("worker stopped")
    return EXIT_OK


def _jobs_stats(engine: Engine, args: argparse.Namespace) -> int:
    with engine.connect() as conn:
        stats = jobs.stats(conn, tenant=args.tenant, kind=args.kind)
    for count in stats.counts:
        print(f"{count.tenant}\t{count.kind}\t{count.state.value}\t{count.count}")
    age = stats.oldest_queued_age
    print(f"total {stats.total()}; dead {stats.dead}; oldest queued waiting {_age(age)}")
    return EXIT_OK


def _age(age: timedelta | None) -> str:
    return "-" if age is None else f"{age.total_seconds():.1f} s"


def _print_jobs(found: list[Job]) -> None:
    for job in found:
        error = (job.last_error or "").splitlines()[-1:] or [""]
        print(f"{job.id}\t{job.tenant}\t{job.kind}\t{job.state.value}\t{job.attempts}\t{error[0]}")


def _jobs_dead(engine: Engine, args: argparse.Namespace) -> int:
    with engine.connect() as conn:
        found = jobs.dead_letter(
            conn, kind=args.kind, tenant=args.tenant, older_than=args.older_than, limit=args.limit
        )
    _print_jobs(found)
    print(f"{len(found)} dead job(s) shown")
    return EXIT_OK


def _jobs_requeue(engine: Engine, args: argparse.Namespace) -> int:
    if (args.job_id is None) == (not args.dead):
        print("error: give a job id, or --dead with optional filters", file=sys.stderr)
        return EXIT_ERROR
    with engine.begin() as conn:
        if args.job_id is not None:
            moved = [jobs.requeue_dead_letter(conn, args.job_id)]
        else:
            moved = jobs.requeue_dead_letters(
                conn, kind=args.kind, tenant=args.tenant, older_than=args.older_than
            )
    _print_jobs(moved)
    print(f"requeued {len(moved)} job(s)")
    return EXIT_OK


def _jobs_prune(engine: Engine, args: argparse.Namespace) -> int:
    with engine.begin() as conn:
        result = jobs.prune(conn, older_than=args.older_than, include_dead=args.include_dead)
    print(f"pruned {result.jobs} job(s) and {result.idempotency_keys} expired idempotency key(s)")
    return EXIT_OK


def duration(text: str) -> timedelta:
    """Parse ``90``, ``90s``, ``15m``, ``12h`` or ``7d`` (an argparse type)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (try 90s, 15m, 12h, 7d)"
        ) from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"a duration cannot be negative: {text!r}")
    return timedelta(seconds=seconds)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _job_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", help="only jobs of this kind")
    parser.add_argument("--tenant", help="only jobs of this tenant")
    parser.add_argument("--older-than", type=duration, help="only jobs dead for this long")


def _add_job_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser("worker", help="process jobs until SIGTERM or Ctrl-C")
    worker.add_argument("--concurrency", type=_positive, default=1, help="threads (default 1)")
    worker.add_argument("--kinds", nargs="+", help="only these job kinds")
    worker.add_argument("--lease", type=_positive, default=30, help="lease in seconds")
    worker.add_argument("--blobs", help="blob directory (default DMS_DATA_DIR/blobs)")
    worker.set_defaults(run=_worker)

    job_parser = commands.add_parser("jobs", help="inspect and repair the job queue")
    job_commands = job_parser.add_subparsers(dest="jobs_command", required=True)
    stats = job_commands.add_parser("stats", help="counts by tenant, kind and state")
    stats.add_argument("--kind")
    stats.add_argument("--tenant")
    stats.set_defaults(run=_jobs_stats)
    dead = job_commands.add_parser("dead", help="list dead jobs, most recent first")
    _job_filters(dead)
    dead.add_argument("--limit", type=_positive, default=100)
    dead.set_defaults(run=_jobs_dead)
    requeue = job_commands.add_parser("requeue", help="put dead jobs back in the queue")
    requeue.add_argument("job_id", nargs="?", type=uuid.UUID, help="one dead job")
    requeue.add_argument("--dead", action="store_true", help="every dead job matching filters")
    _job_filters(requeue)
    requeue.set_defaults(run=_jobs_requeue)
    prune = job_commands.add_parser("prune", help="delete old finished jobs and expired keys")
    prune.add_argument("--older-than", type=duration, default=timedelta(days=7))
    prune.add_argument("--include-dead", action="store_true", help="dead jobs too")
    prune.set_defaults(run=_jobs_prune)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dms``."""
    parser = argparse.ArgumentParser(prog="dms", description=__doc__)
    parser.add_argument(
        "--database-url", help="PostgreSQL URL (default: DMS_DATABASE_URL, else embedded server)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tenants = commands.add_parser("tenants", help="create, drop or list tenants")
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True)
    create = tenant_commands.add_parser("create", help="create a tenant at the head revision")
    create.add_argument("slug")
    create.set_defaults(run=_tenants_create)
    drop = tenant_commands.add_parser("drop", help="drop a tenant and all its data")
    drop.add_argument("slug")
    drop.add_argument("--yes", action="store_true", help="confirm that the data goes")
    drop.set_defaults(run=_tenants_drop)
    tenant_commands.add_parser("list", help="list tenants").set_defaults(run=_tenants_list)

    migrate = commands.add_parser("migrate", help="upgrade the shared schema and tenants")
    migrate.add_argument("--tenant", help="only this tenant")
    migrate.add_argument("--revision", default="head")
    migrate.set_defaults(run=_migrate)
    downgrade = commands.add_parser("downgrade", help="downgrade tenants and the shared schema")
    downgrade.add_argument("revision", help="target revision, e.g. -1 or base")
    downgrade.add_argument("--tenant", help="only this tenant")
    downgrade.set_defaults(run=_downgrade)

    commands.add_parser("status", help="every schema's revision").set_defaults(run=_status)
    users = commands.add_parser("users", help="the IAM users table")
    users_commands = users.add_subparsers(dest="users_command", required=True)
    users_commands.add_parser(
        "stand-in", help="create a development stand-in users table"
    ).set_defaults(run=_users_stand_in)
    commands.add_parser("seed", help="fill the database with development data").set_defaults(
        run=_seed
    )
    demo = commands.add_parser("demo", help="migrate, seed, process and summarise")
    demo.add_argument(
        "--timeout",
        type=float,
        default=DEMO_TIMEOUT_SECONDS,
        help=f"seconds to wait for the seed jobs (default {DEMO_TIMEOUT_SECONDS})",
    )
    demo.set_defaults(run=_demo)
    _add_job_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dms`` with ``argv`` and return the exit status."""
    args = build_parser().parse_args(argv)
    try:
        engine = create_engine(args.database_url)
        try:
            result: int = args.run(engine, args)
        finally:
            engine.dispose()
    except OperationalError as exc:
        print(f"error: cannot use the database: {exc.orig}", file=sys.stderr)
        return EXIT_ERROR
    except DmsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return result


if __name__ == "__main__":
    sys.exit(main())
