"""``dms import PATH --tenant T --user U [--into FOLDER]``: bring a file tree into a tenant.

A progress bar (tqdm) on a terminal; elsewhere a plain line on stderr every
:data:`PROGRESS_LINE_SECONDS`. The report is a summary, then one line per renamed or skipped
entry; ``--json`` prints it as one document instead. Exit status 1 when a file that could be
imported was not (a refused name, an unreadable file, ...), so that a script notices.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from typing import NoReturn

from tqdm import tqdm

from dms.cli.arguments import add_blobs_option, positive
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.folders import resolve_folder
from dms.cli.output import add_json_flag, emit_json, tell
from dms.fleet.interrupts import sigterm_as_interrupt
from dms.importing import ImportProgress, ImportReport, NamePolicy, import_tree
from dms.importing.importer import DEFAULT_BATCH_FILES
from dms.importing.walk import count_files, source_root
from dms.uow import UnitOfWork

#: Seconds between two progress lines when stderr is not a terminal.
PROGRESS_LINE_SECONDS = 10.0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``import`` to ``commands``."""
    parser = commands.add_parser(
        "import",
        help="import a folder (or a file) as folders and documents",
        description="Mirror PATH as a folder of documents in a tenant. Re-running it resumes "
        "an interrupted import and imports nothing twice.",
    )
    parser.add_argument("path", help="the folder (or file) to import")
    parser.add_argument("--tenant", required=True, help="the tenant to import into")
    parser.add_argument(
        "--user", required=True, type=uuid.UUID, help="id of the user the import acts as"
    )
    parser.add_argument(
        "--into",
        help="existing folder to import into: its id, or its path of names (Archive/2026); "
        "default: the top level",
    )
    parser.add_argument(
        "--names",
        choices=[policy.value for policy in NamePolicy],
        default=NamePolicy.RENAME.value,
        help="names that collide or break the rules: rename them with a visible suffix "
        "(default) or refuse them (not imported); both are reported",
    )
    add_blobs_option(parser)
    parser.add_argument(
        "--batch-size",
        type=positive,
        default=DEFAULT_BATCH_FILES,
        help=f"files per transaction (default {DEFAULT_BATCH_FILES})",
    )
    add_json_flag(parser)
    parser.set_defaults(run=_import)


def _import(ctx: Context, args: argparse.Namespace) -> int:
    root = source_root(args.path)
    into = _resolve_into(ctx, args.tenant, args.into, args.user)
    store = ctx.store(args.blobs)
    with _Progress(count_files(root)) as progress, sigterm_as_interrupt() as signals:

        def after_batch(done: ImportProgress) -> None:
            progress(done)
            signals.stop_here()  # between two committed batches

        try:
            report = import_tree(
                ctx.engine,
                root,
                tenant=args.tenant,
                user_id=args.user,
                store=store,
                into=into,
                name_policy=NamePolicy(args.names),
                batch_files=args.batch_size,
                progress=after_batch,
                settings=ctx.settings,
            )
        except KeyboardInterrupt:
            # Every committed batch stays; the one in flight was rolled back.
            tell(
                f"interrupted after {progress.files_done:,} of {progress.total:,} files: run the "
                "same dms import again to resume (nothing is imported twice)",
                level=logging.WARNING,
            )
            return signals.exit_status
    _print(report, as_json=args.json)
    return EXIT_OK if report.complete else EXIT_ERROR


def _resolve_into(ctx: Context, tenant: str, into: str | None, user: uuid.UUID) -> uuid.UUID | None:
    """The folder of ``--into``: an id, or a path of names from the top level (ignoring case).

    Found as the importing user, who must be able to see it (docs/access.md).
    """
    with UnitOfWork(ctx.engine, tenant=tenant, user_id=user, settings=ctx.settings) as uow:
        return resolve_folder(uow, into)


def _print(report: ImportReport, *, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                **{key: getattr(report, key) for key in ("tenant", "source", "into")},
                "name_policy": report.name_policy,
                "complete": report.complete,
                "files_per_second": round(report.files_per_second, 1),
                "counts": report.counts,
                "timings": report.timings,
                "renamed": report.renamed,
                "skipped": report.skipped,
            }
        )
        return
    print(report.summary())
    for entry in [*report.renamed, *report.skipped]:
        target = f" -> {entry.title!r}" if entry.title else ""
        print(f"{entry.action.value}\t{entry.kind}\t{entry.path!r}{target}\t{entry.reason}")


class _Progress:
    """Called after each committed batch: a bar on a terminal, else a line now and then."""

    def __init__(self, total: int) -> None:
        self.total = total
        #: Files of the batches committed so far.
        self.files_done = 0
        self._bar: tqdm[NoReturn] | None = None
        self._last_line = time.monotonic()

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty():
            self._bar = tqdm(total=self.total, unit="file", unit_scale=True, file=sys.stderr)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()

    def __call__(self, progress: ImportProgress) -> None:
        self.files_done = progress.files_done
        if self._bar is not None:
            self._bar.update(progress.files_done - self._bar.n)
            return
        now = time.monotonic()
        if now - self._last_line >= PROGRESS_LINE_SECONDS or progress.files_done == self.total:
            self._last_line = now
            rate = progress.files_done / max(progress.elapsed_seconds, 1e-9)
            tell(
                f"import: {progress.files_done} of {self.total} files, "
                f"{progress.bytes_read / 1e6:.1f} MB, {rate:.0f} files/s",
                level=logging.INFO,
            )
