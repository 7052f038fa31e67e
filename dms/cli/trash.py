"""``dms trash list|purge``: what a tenant has deleted, and deleting it for good.

``purge`` destroys data: it says what it would purge and needs ``--yes`` (``--dry-run`` only
counts). Purged documents take their revisions, tags and values with them; their blobs' files
go too unless another revision still has the same bytes.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from dms.blobs import purge_trash
from dms.cli.arguments import DURATION_FORMS, add_blobs_option, duration, positive
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.output import add_json_flag, confirmed, emit_json
from dms.domain import Document
from dms.domain.audit import OPERATOR
from dms.uow import UnitOfWork

#: Documents counted per statement by ``--dry-run`` and the refusal.
_COUNT_PAGE = 1000


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``trash`` to ``commands``."""
    trash = commands.add_parser("trash", help="list a tenant's deleted documents or purge them")
    trash_commands = trash.add_subparsers(dest="trash_command", required=True)
    listing = trash_commands.add_parser("list", help="deleted documents, most recent first")
    listing.add_argument("--tenant", required=True, help="the tenant")
    listing.add_argument("--limit", type=positive, default=100, help="at most this many (100)")
    add_json_flag(listing)
    listing.set_defaults(run=_list)
    purge = trash_commands.add_parser(
        "purge", help="delete for good what has been in the trash longer than a duration"
    )
    purge.add_argument("--tenant", required=True, help="the tenant")
    purge.add_argument(
        "--older-than",
        type=duration,
        required=True,
        help=f"in the trash longer than this, {DURATION_FORMS}; 0s: everything",
    )
    add_blobs_option(purge)
    purge.add_argument("--dry-run", action="store_true", help="only count what would go")
    purge.add_argument("--yes", action="store_true", help="confirm that the documents go")
    add_json_flag(purge)
    purge.set_defaults(run=_purge)


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with UnitOfWork(ctx.engine, tenant=args.tenant, system=OPERATOR) as uow:
        found = uow.documents.trash(limit=args.limit)
    if args.json:
        emit_json({"tenant": args.tenant, "documents": [_row(d) for d in found]})
        return EXIT_OK
    for document in found:
        assert document.deleted_at is not None  # noqa: S101 (the trash holds deleted ones)
        print(f"{document.id}\t{document.deleted_at.isoformat()}\t{document.title}")
    print(f"{len(found)} document(s) in the trash shown")
    return EXIT_OK


def _purge(ctx: Context, args: argparse.Namespace) -> int:
    cutoff = datetime.now(timezone.utc) - args.older_than
    if args.dry_run or not args.yes:
        count = _count(ctx, args.tenant, cutoff)
        what = f"{count} document(s) of tenant {args.tenant} deleted before {cutoff.isoformat()}"
        if args.dry_run:
            _report(args, f"would purge {what}", count, 0, dry_run=True)
            return EXIT_OK
        if not confirmed(args, f"purge {what}"):
            return EXIT_ERROR
    store = ctx.store(args.blobs)
    done = purge_trash(
        ctx.engine, tenant=args.tenant, store=store, deleted_before=cutoff, settings=ctx.settings
    )
    line = (
        f"purged {done.documents} document(s) of tenant {args.tenant} deleted before "
        f"{cutoff.isoformat()}; {done.blobs_released} blob(s) released"
    )
    _report(args, line, done.documents, done.blobs_released, dry_run=False)
    return EXIT_OK


def _count(ctx: Context, tenant: str, cutoff: datetime) -> int:
    count = 0
    last: Document | None = None
    with UnitOfWork(ctx.engine, tenant=tenant, system=OPERATOR) as uow:
        while page := uow.documents.trash(limit=_COUNT_PAGE, after=last, deleted_before=cutoff):
            count += len(page)
            last = page[-1]
    return count


def _report(
    args: argparse.Namespace, line: str, documents: int, blobs: int, *, dry_run: bool
) -> None:
    if args.json:
        emit_json(
            {
                "tenant": args.tenant,
                "dry_run": dry_run,
                "documents": documents,
                "blobs_released": blobs,
            }
        )
    else:
        print(line)


def _row(document: Document) -> dict[str, object]:
    return {
        "id": document.id,
        "title": document.title,
        "folder_id": document.folder_id,
        "deleted_at": document.deleted_at,
    }
