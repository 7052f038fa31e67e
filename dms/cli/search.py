"""``dms search``: find documents by what they say, and look after the search index.

::

    dms search --tenant T WORDS...             documents by relevance, with a snippet each
    dms search config --tenant T [--set NAME]  show, or change and reindex, the configuration
    dms search reindex [--tenant T] [--jobs N] rebuild what another configuration built
    dms search backfill [--tenant T]           enqueue the extraction of revisions without text

The words are one query in the syntax of :mod:`dms.domain.text_query` (quote it in the shell
to keep phrases: ``dms search --tenant acme '"late fee" -draft'``). A query that is exactly one
of the subcommands' names is searched when quoted as a phrase (``'"reindex"'``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from dms import indexing, tenancy
from dms.cli.arguments import positive
from dms.cli.context import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Context
from dms.cli.fleet import add_jobs_option, jobs_of, print_problems, progress, run_fleet
from dms.cli.output import add_json_flag, emit_json, tell
from dms.domain import Cursor, DocumentQuery, Page
from dms.domain.audit import OPERATOR
from dms.domain.model import Document
from dms.fleet.report import FleetReport
from dms.services import search_documents
from dms.uow import UnitOfWork

#: Results printed by default.
DEFAULT_LIMIT = 20


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``search`` to ``commands``."""
    parser = commands.add_parser(
        "search",
        help="find documents by their content, title, tags and values; manage the index",
        description="Search a tenant's documents (WORDS: quoted phrases, 'or', -exclusion, "
        "prefix*), or: 'config [--set NAME]' to show or change the tenant's text search "
        "configuration, 'reindex' to rebuild what another configuration built, 'backfill' to "
        "enqueue the text extraction of revisions that have none.",
    )
    parser.add_argument("words", nargs="+", help="the query, or config/reindex/backfill")
    parser.add_argument("--tenant", help="the tenant (reindex and backfill: default every one)")
    parser.add_argument(
        "--limit", type=positive, default=DEFAULT_LIMIT, help="documents to show (default 20)"
    )
    parser.add_argument("--after", help="the next page: the cursor a previous search printed")
    parser.add_argument(
        "--set",
        metavar="NAME",
        dest="config",
        help="config: the text search configuration to use (simple, english, german, ...)",
    )
    add_jobs_option(parser)
    add_json_flag(parser)
    parser.set_defaults(run=_search)


def _search(ctx: Context, args: argparse.Namespace) -> int:
    command: Callable[[Context, argparse.Namespace], int] = {
        "config": _config,
        "reindex": _reindex,
        "backfill": _backfill,
    }.get(args.words[0], _query)
    return command(ctx, args)


def _usage(message: str) -> int:
    tell(f"dms search: error: {message}")
    return EXIT_USAGE


def _query(ctx: Context, args: argparse.Namespace) -> int:
    if args.tenant is None:
        return _usage("searching needs --tenant")
    if args.config is not None:
        return _usage("--set is for config")
    if args.jobs is not None:
        return _usage("--jobs is for reindex")
    text = " ".join(args.words)
    after = None if args.after is None else Cursor.decode(args.after)
    with UnitOfWork(ctx.engine, tenant=args.tenant, system=OPERATOR) as uow:
        page = search_documents(uow, DocumentQuery(text=text), limit=args.limit, after=after)
    if args.json:
        emit_json(_as_json(args.tenant, text, page))
    else:
        _print_page(page)
    return EXIT_OK


def _as_json(tenant: str, text: str, page: Page[Document]) -> dict[str, object]:
    return {
        "tenant": tenant,
        "query": text,
        "total": page.estimated_total,
        "total_exact": page.total_exact,
        "documents": [
            {
                "id": document.id,
                "title": document.title,
                "folder_id": document.folder_id,
                "updated_at": document.updated_at,
                "snippet": page.snippets.get(document.id),
            }
            for document in page.items
        ],
        "next_cursor": None if page.next_cursor is None else page.next_cursor.encode(),
    }


def _print_page(page: Page[Document]) -> None:
    for document in page.items:
        print(f"{document.title}\t{document.id}")
        snippet = page.snippets.get(document.id)
        if snippet is not None:
            print(f"    {' '.join(snippet.marked('[', ']').split())}")
    total = page.estimated_total or 0
    about = "" if page.total_exact else "more than "
    print(f"{len(page.items)} of {about}{total} document(s)")
    if page.next_cursor is not None:
        print(f"next page: --after {page.next_cursor.encode()}")


def _config(ctx: Context, args: argparse.Namespace) -> int:
    if args.tenant is None or len(args.words) > 1:
        return _usage("config takes --tenant and --set NAME, no words")
    if args.config is None:
        with UnitOfWork(ctx.engine, tenant=args.tenant, system=OPERATOR) as uow:
            current, available = uow.search.config(), uow.search.available_configs()
        if args.json:
            emit_json({"tenant": args.tenant, "config": current, "available": available})
        else:
            print(f"{current} (available: {', '.join(available)})")
        return EXIT_OK
    done = indexing.set_text_search_config(ctx.engine, args.tenant, args.config)
    if args.json:
        emit_json(done)
    else:
        print(f"tenant {done.tenant}: {done.config}, {done.documents} document(s) reindexed")
    return EXIT_OK


def _reindex(ctx: Context, args: argparse.Namespace) -> int:
    if len(args.words) > 1:
        return _usage("reindex takes no words")
    tenants = None if args.tenant is None else [args.tenant]
    again = ["search", "reindex", *([] if args.tenant is None else ["--tenant", args.tenant])]
    outcome = run_fleet(
        ctx,
        lambda: indexing.reindex(
            ctx.engine, tenants, jobs=jobs_of(args), progress=progress("reindex")
        ),
        lambda _report: again,
        as_json=args.json,
    )
    if isinstance(outcome, int):
        return outcome
    return _concluded(outcome, args.json)


def _concluded(report: FleetReport, as_json: bool) -> int:
    if as_json:
        emit_json(report.as_json())
    else:
        print_problems(report)
        counts = ", ".join(f"{n} {outcome}" for outcome, n in report.summary().items())
        print(f"{len(report.tenants)} tenant(s): {counts or 'none'}")
    return EXIT_ERROR if report.problems else EXIT_OK


def _backfill(ctx: Context, args: argparse.Namespace) -> int:
    if len(args.words) > 1:
        return _usage("backfill takes no words")
    if args.jobs is not None:
        return _usage("--jobs is for reindex")
    tenants = (
        [args.tenant]
        if args.tenant is not None
        else [tenant.slug for tenant in tenancy.list_tenants(ctx.engine)]
    )
    enqueued = {tenant: indexing.backfill_extraction(ctx.engine, tenant) for tenant in tenants}
    if args.json:
        emit_json({"enqueued": enqueued})
    else:
        for tenant, count in enqueued.items():
            print(f"tenant {tenant}: {count} extraction job(s) enqueued")
    return EXIT_OK
