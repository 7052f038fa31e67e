"""``dms blobs gc``: remove from the blob store what no tenant needs, safely while imports run.

It destroys files: it counts what it would remove and needs ``--yes`` (or ``yes`` typed on a
terminal); ``--dry-run`` only counts. What goes, and why nothing a revision references can go,
is said in :func:`dms.blobs.collect_garbage`.
"""

from __future__ import annotations

import argparse

from dms.blobs import Garbage, collect_garbage
from dms.cli.arguments import add_blobs_option, duration
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.output import add_json_flag, confirmed, emit_json
from dms.storage import BlobStore
from dms.storage.store import STAGING_GRACE


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``blobs`` and its subcommand ``gc`` to ``commands``."""
    blobs = commands.add_parser("blobs", help="the blob store: remove what nothing needs")
    blob_commands = blobs.add_subparsers(dest="blobs_command", required=True)
    gc = blob_commands.add_parser(
        "gc",
        help="remove dropped tenants' blobs, files no revision has, and staging leftovers",
    )
    gc.add_argument(
        "--tenant",
        action="append",
        help="only this tenant's unreferenced files (repeatable; default: every tenant, "
        "and the blobs of dropped tenants)",
    )
    gc.add_argument(
        "--staging-older-than",
        type=duration,
        default=STAGING_GRACE,
        help="staging files older than this are leftovers (default 1h)",
    )
    add_blobs_option(gc)
    gc.add_argument("--dry-run", action="store_true", help="only count what would go")
    gc.add_argument("--yes", action="store_true", help="confirm that the files go")
    add_json_flag(gc)
    gc.set_defaults(run=_gc)


def _gc(ctx: Context, args: argparse.Namespace) -> int:
    store = ctx.store(args.blobs)
    counted = _collect(ctx, args, store, dry_run=True)
    if args.dry_run:
        _report(args, store, counted, dry_run=True)
        return EXIT_OK
    if counted.total and not confirmed(args, f"remove {_what(counted)} from {store.location}"):
        return EXIT_ERROR
    _report(args, store, _collect(ctx, args, store, dry_run=False), dry_run=False)
    return EXIT_OK


def _collect(ctx: Context, args: argparse.Namespace, store: BlobStore, *, dry_run: bool) -> Garbage:
    return collect_garbage(
        ctx.engine,
        store,
        tenants=args.tenant,
        staging_older_than=args.staging_older_than,
        dry_run=dry_run,
        settings=ctx.settings,
    )


def _what(garbage: Garbage) -> str:
    dropped = sum(garbage.dropped_tenants.values())
    return (
        f"{dropped} blob(s) of {len(garbage.dropped_tenants)} dropped tenant(s), "
        f"{garbage.unregistered} unregistered and {garbage.unreferenced} unreferenced blob(s), "
        f"{garbage.staging} staging file(s)"
    )


def _report(args: argparse.Namespace, store: BlobStore, garbage: Garbage, *, dry_run: bool) -> None:
    if args.json:
        emit_json(
            {
                "store": store.location,
                "tenants": args.tenant,  # the tenants named, or null: every tenant
                "dry_run": dry_run,
                "dropped_tenants": [
                    {"tenant": tenant, "blobs": count}
                    for tenant, count in sorted(garbage.dropped_tenants.items())
                ],
                "unregistered": garbage.unregistered,
                "unreferenced": garbage.unreferenced,
                "staging": garbage.staging,
            }
        )
        return
    print(f"{'would remove' if dry_run else 'removed'} {_what(garbage)} from {store.location}")
