"""``dms healthcheck`` and ``dms metrics``: is the database in shape, and its queue's figures."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from types import ModuleType

from sqlalchemy.exc import DBAPIError

from dms import health
from dms.cli.arguments import duration, port
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.output import add_json_flag, emit_json, tell
from dms.errors import ConfigurationError
from dms.roles import acting_role_warning

#: Where the metrics exporter listens unless told otherwise: this host only (its figures are
#: served to whoever asks, unauthenticated), as :func:`dms.metrics.serve` by default.
METRICS_ADDRESS = "127.0.0.1"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``healthcheck`` and ``metrics`` to ``commands``."""
    check = commands.add_parser(
        "healthcheck",
        help="exit 0 if the database is reachable, at head, its queue flowing; else 1",
    )
    check.add_argument(
        "--max-queue-age",
        type=duration,
        default=health.MAX_QUEUE_AGE,
        help="longest acceptable wait of the oldest runnable job (default 5m)",
    )
    check.add_argument(
        "--max-expired-lease",
        type=duration,
        default=health.MAX_EXPIRED_LEASE,
        help="how long an expired lease may stay untaken (default 1m)",
    )
    check.add_argument(
        "--blobs",
        metavar="DIR|s3://BUCKET/PREFIX",
        help="also check that this blob store holds the tenants' blobs (default: DMS_BLOBS "
        "if set, else no such check)",
    )
    add_json_flag(check)
    check.set_defaults(run=_healthcheck)
    metrics = commands.add_parser(
        "metrics", help="serve the queue's Prometheus metrics until SIGTERM (dms[metrics])"
    )
    metrics.add_argument("--port", type=port, default=9187, help="TCP port (default 9187)")
    add_address_option(metrics, "--address")
    metrics.set_defaults(run=_metrics)


def add_address_option(parser: argparse.ArgumentParser, flag: str) -> None:
    """``flag``: the address the metrics exporter listens on, :data:`METRICS_ADDRESS` if none."""
    parser.add_argument(
        flag,
        default=METRICS_ADDRESS,
        metavar="ADDRESS",
        help=f"address the metrics listen on (default {METRICS_ADDRESS}: this host only; "
        "0.0.0.0 for every interface, for a scraper on another host or a container's "
        "published port)",
    )


def _healthcheck(ctx: Context, args: argparse.Namespace) -> int:
    location = args.blobs or ctx.settings.blobs
    checks = health.check(
        ctx.engine,
        max_queue_age=args.max_queue_age,
        max_expired_lease=args.max_expired_lease,
        store=ctx.store(location) if location else None,
    )
    healthy = all(c.ok for c in checks)
    _warn_if_unprotected(ctx)
    figures = None
    if any(c.name == "leases" for c in checks):  # the queue's tables exist: its figures too
        with ctx.engine.connect() as conn:
            figures = health.queue_health(conn, max_expired_lease=args.max_expired_lease)
    if args.json:
        emit_json({"healthy": healthy, "checks": checks, "queue": figures})
    else:
        for item in checks:
            print(f"{'ok' if item.ok else 'FAIL':<5} {item.name:<9} {item.detail}")
        if figures is not None:
            _print_figures(figures)
        print("healthy" if healthy else "unhealthy")
    return EXIT_OK if healthy else EXIT_ERROR


def _warn_if_unprotected(ctx: Context) -> None:
    """Say it when the application's connection is one the policies do not hold.

    Healthy all the same: the database works, but it does not keep users apart.
    """
    try:
        with ctx.engine.connect() as conn:
            warning = acting_role_warning(conn)
    except DBAPIError:
        return  # unreachable: the checks above say so
    if warning is not None:
        tell(f"warning: {warning}", level=logging.WARNING)


def _print_figures(figures: health.QueueHealth) -> None:
    vacuumed = (
        "never" if figures.last_vacuum is None else f"{figures.last_vacuum:%Y-%m-%d %H:%M:%S%z}"
    )
    print(
        f"queue table: {figures.live_rows} live / {figures.dead_rows} dead rows; "
        f"last vacuum {vacuumed}"
    )
    holder = figures.cleanup_holder
    if holder is not None:
        print(f"oldest snapshot: {holder.source} {holder.name}, {holder.age_xids} transactions old")
    for count in figures.counts:
        print(f"jobs: {count.kind} {count.state.value} {count.count}")


def metrics_module() -> ModuleType:
    """:mod:`dms.metrics`, or one line saying how to install what it needs."""
    try:
        from dms import metrics  # noqa: PLC0415 -- optional dependency, imported on demand
    except ImportError:
        raise ConfigurationError(
            "metrics need the Prometheus client: pip install 'dms[metrics]'"
        ) from None
    return metrics


def _metrics(ctx: Context, args: argparse.Namespace) -> int:
    metrics_module().serve(ctx.engine, args.port, address=args.address)
    print(f"metrics on http://{args.address}:{args.port}/metrics; SIGTERM or Ctrl-C stops it")
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    while not stopped.wait(timeout=0.5):  # a timeout keeps the main thread open to signals
        pass
    print("metrics stopped")
    return EXIT_OK
