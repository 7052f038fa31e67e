"""``dms audit seal|verify|export|prune|reads``: the audit trail, for operators (docs/audit.md).

``verify`` exits 1 when the chain is broken and says where and how. ``prune`` destroys events:
it says how many it would remove and needs ``--yes`` (``--dry-run`` only counts); what remains
stays verifiable from the checkpoint it leaves.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone

from dms import tenancy
from dms.audit import (
    AuditPruning,
    AuditVerification,
    audit_head,
    check_anchor,
    export_audit_trail,
    prune_audit_trail,
    seal_audit_trail,
    verify_audit_trail,
)
from dms.cli.arguments import duration, moment
from dms.cli.context import EXIT_ERROR, EXIT_OK, Context
from dms.cli.output import add_json_flag, confirmed, emit_json, tell
from dms.domain.audit import OPERATOR
from dms.errors import DmsError
from dms.uow import UnitOfWork


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``audit`` and its subcommands to ``commands``."""
    audit = commands.add_parser("audit", help="the audit trail: seal, verify, export, prune")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    seal = audit_commands.add_parser("seal", help="chain the committed events of tenants")
    _add_tenants(seal)
    add_json_flag(seal)
    seal.set_defaults(run=_seal)
    verify = audit_commands.add_parser(
        "verify", help="recompute a tenant's chain; exit 1 at the first broken link"
    )
    verify.add_argument("--tenant", required=True, help="the tenant")
    verify.add_argument(
        "--no-seal", action="store_true", help="check only what is sealed; seal nothing first"
    )
    verify.add_argument(
        "--anchor",
        type=_anchor,
        metavar="SEQ:HASH",
        help="a head that dms audit head printed earlier, kept outside the database: the event "
        "there must still hold that hash (unless pruned)",
    )
    add_json_flag(verify)
    verify.set_defaults(run=_verify)
    head = audit_commands.add_parser(
        "head",
        help="seal, then print a tenant's chain head as SEQ:HASH, to keep outside the database",
    )
    head.add_argument("--tenant", required=True, help="the tenant")
    head.set_defaults(run=_head)
    export = audit_commands.add_parser("export", help="a tenant's events as JSON lines")
    export.add_argument("--tenant", required=True, help="the tenant")
    export.add_argument("--since", type=moment, help="from this time on (ISO 8601, inclusive)")
    export.add_argument("--until", type=moment, help="before this time (ISO 8601, exclusive)")
    export.add_argument("--output", help="write to this file instead of stdout")
    export.set_defaults(run=_export)
    prune = audit_commands.add_parser(
        "prune", help="remove old events, leaving a checkpoint that keeps the rest verifiable"
    )
    _add_tenants(prune)
    cutoff = prune.add_mutually_exclusive_group(required=True)
    cutoff.add_argument("--before", type=moment, help="events before this time (ISO 8601)")
    cutoff.add_argument("--older-than", type=duration, help="events older than this: 365d")
    prune.add_argument("--dry-run", action="store_true", help="only count what would go")
    prune.add_argument("--yes", action="store_true", help="confirm that the events go")
    add_json_flag(prune)
    prune.set_defaults(run=_prune)
    reads = audit_commands.add_parser(
        "reads", help="record reading a revision's content as an event (on), or not (off)"
    )
    reads.add_argument("--tenant", required=True, help="the tenant")
    reads.add_argument("setting", choices=("on", "off"), help="on or off")
    reads.set_defaults(run=_reads)


def _add_tenants(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tenant", action="append", help="this tenant (repeatable; default: every tenant)"
    )


def _tenants(ctx: Context, named: list[str] | None) -> list[str]:
    if named:
        return [tenancy.validate_slug(slug) for slug in named]
    return [tenant.slug for tenant in tenancy.list_tenants(ctx.engine)]


def _seal(ctx: Context, args: argparse.Namespace) -> int:
    sealed = {
        slug: seal_audit_trail(ctx.engine, slug, settings=ctx.settings)
        for slug in _tenants(ctx, args.tenant)
    }
    if args.json:
        emit_json({"sealed": sealed})
        return EXIT_OK
    for slug, count in sealed.items():
        print(f"sealed {count} event(s) of tenant {slug}")
    return EXIT_OK


def _anchor(text: str) -> tuple[int, bytes]:
    """``SEQ:HASH`` (the hash in hex), as ``dms audit head`` prints it."""
    seq, _, digest = text.partition(":")
    try:
        return check_anchor((int(seq), bytes.fromhex(digest)))
    except (ValueError, DmsError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is no anchor: SEQ:HASH as dms audit head prints it"
        ) from None


def _head(ctx: Context, args: argparse.Namespace) -> int:
    seq, digest = audit_head(ctx.engine, tenancy.validate_slug(args.tenant), settings=ctx.settings)
    print(f"{seq}:{digest.hex()}")
    return EXIT_OK


def _verify(ctx: Context, args: argparse.Namespace) -> int:
    report = verify_audit_trail(
        ctx.engine, args.tenant, seal=not args.no_seal, anchor=args.anchor, settings=ctx.settings
    )
    if args.json:
        emit_json({**_fields(report), "intact": report.intact})
    else:
        print(_verdict(report))
    return EXIT_OK if report.intact else EXIT_ERROR


def _fields(report: AuditVerification) -> dict[str, object]:
    return {name: getattr(report, name) for name in report.__dataclass_fields__}


def _verdict(report: AuditVerification) -> str:
    where = f" after checkpoint {report.starts_after}" if report.starts_after else ""
    counts = f"{report.checked} event(s) checked{where}, {report.unsealed} not sealed yet"
    if report.anchor_pruned:
        counts += f"; the anchor is at or below checkpoint {report.starts_after} (pruned)"
    if report.intact:
        return f"tenant {report.tenant}: intact; {counts}"
    return f"tenant {report.tenant}: BROKEN at event {report.broken_at}: {report.problem}; {counts}"


def _export(ctx: Context, args: argparse.Namespace) -> int:
    options = {"since": args.since, "until": args.until, "settings": ctx.settings}
    if args.output is None:
        written = export_audit_trail(ctx.engine, args.tenant, sys.stdout, **options)
    else:
        # Written next to the target and renamed when complete: a failed export leaves no
        # file that looks like a whole one.
        partial = f"{args.output}.partial"
        try:
            with open(partial, "w", encoding="utf-8") as out:
                written = export_audit_trail(ctx.engine, args.tenant, out, **options)
        except BaseException:
            os.unlink(partial)
            raise
        os.replace(partial, args.output)
    tell(f"exported {written} event(s) of tenant {args.tenant}", level=20)
    return EXIT_OK


def _prune(ctx: Context, args: argparse.Namespace) -> int:
    before = args.before or datetime.now(timezone.utc) - args.older_than
    slugs = _tenants(ctx, args.tenant)
    if args.dry_run or not args.yes:
        counted = [_pruning(ctx, slug, before, dry_run=True) for slug in slugs]
        total = sum(p.pruned for p in counted)
        what = f"{total} event(s) of {len(slugs)} tenant(s) before {before.isoformat()}"
        if args.dry_run:
            _report(args, counted, f"would prune {what}")
            return EXIT_OK
        if total and not confirmed(args, f"prune {what}"):
            return EXIT_ERROR
    done = [_pruning(ctx, slug, before, dry_run=False) for slug in slugs]
    total = sum(p.pruned for p in done)
    _report(args, done, f"pruned {total} event(s) of {len(slugs)} tenant(s) before {before}")
    return EXIT_OK


def _pruning(ctx: Context, slug: str, before: datetime, *, dry_run: bool) -> AuditPruning:
    return prune_audit_trail(
        ctx.engine, slug, before=before, dry_run=dry_run, settings=ctx.settings
    )


def _report(args: argparse.Namespace, prunings: list[AuditPruning], line: str) -> None:
    if args.json:
        emit_json({"dry_run": args.dry_run, "tenants": prunings})
        return
    for pruning in prunings:
        if pruning.pruned:
            print(f"tenant {pruning.tenant}: {pruning.pruned} event(s) through {pruning.through}")
    print(line)


def _reads(ctx: Context, args: argparse.Namespace) -> int:
    with UnitOfWork(ctx.engine, tenant=args.tenant, system=OPERATOR) as uow:
        uow.audit.set_record_reads(args.setting == "on")
        uow.commit()
    recorded = "recorded" if args.setting == "on" else "not recorded"
    print(f"tenant {args.tenant}: reading a revision's content is {recorded}")
    return EXIT_OK
