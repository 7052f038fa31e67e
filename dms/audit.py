"""The audit trail's operations on a tenant: seal, verify, export, prune (docs/audit.md).

What an application reads of the trail is in its unit of work (``uow.audit``). These are an
operator's, and run on an engine, not in a caller's unit of work: sealing
commits batch by batch, and a verification or an export reads one consistent snapshot
(``REPEATABLE READ``) however long it takes. Each acts as the system principal
:data:`~dms.domain.audit.OPERATOR` unless told otherwise.

Sealing after commit is what keeps a tenant's writers concurrent: a writer only inserts its
events (unsealed), as any row; only sealers lock the chain's head, and a sealer sees only
committed events, which it chains in the order of their times.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TextIO

from sqlalchemy.engine import Engine

from dms.config import Settings, settings_of
from dms.domain.audit import OPERATOR
from dms.domain.validation import check_flag, check_timestamp, shown
from dms.errors import ValidationError
from dms.repositories.audit import SEAL_BATCH, Links
from dms.schema.tenant import AUDIT_GENESIS
from dms.uow import UnitOfWork


@dataclass(frozen=True, kw_only=True)
class AuditVerification:
    """What :func:`verify_audit_trail` found.

    ``checked`` links were intact, from position ``starts_after + 1`` (after the newest
    checkpoint; 0: none) on. ``broken_at`` is the position of the first broken link and
    ``problem`` says what is wrong there (``None`` for both: the chain is intact up to its
    head). ``unsealed`` events are not in the chain yet, so not covered.
    """

    tenant: str
    checked: int
    starts_after: int
    head: int
    unsealed: int
    broken_at: int | None = None
    problem: str | None = None
    anchor_pruned: bool = False
    """An anchor was given and pruning has removed it: the events up to the checkpoint are
    gone, as pruning leaves them (docs/audit.md, "Anchoring the head outside the database")."""

    @property
    def intact(self) -> bool:
        """Whether every link checked out and the head matches the last event."""
        return self.problem is None


@dataclass(frozen=True, kw_only=True)
class AuditPruning:
    """What :func:`prune_audit_trail` removed (or, in a dry run, would remove)."""

    tenant: str
    pruned: int
    through: int | None
    dry_run: bool


def seal_audit_trail(engine: Engine, tenant: str, *, settings: Settings | None = None) -> int:
    """Seal every committed event of ``tenant`` into its chain; return how many were sealed.

    One transaction per :data:`~dms.repositories.audit.SEAL_BATCH` events, so a long backlog
    makes progress that stays, and concurrent sealers take turns on the chain's head.
    """
    resolved = settings if settings is not None else settings_of(engine)
    total = 0
    last = None
    while True:
        with UnitOfWork(engine, tenant=tenant, system=OPERATOR, settings=resolved) as uow:
            sealed = uow.audit.seal(after=last)
            uow.commit()
        total += sealed.count
        last = sealed.last
        if sealed.count < SEAL_BATCH:
            return total


def verify_audit_trail(
    engine: Engine,
    tenant: str,
    *,
    seal: bool = True,
    anchor: tuple[int, bytes] | None = None,
    settings: Settings | None = None,
) -> AuditVerification:
    """Recompute ``tenant``'s chain from its newest checkpoint and report the first broken link.

    ``seal``: seal what is committed first, so that the verification covers it. ``anchor``: a
    head (position, hash) read earlier and kept outside the database (:func:`audit_head`): the
    event there must still hold that hash, unless pruning removed it (then
    :attr:`AuditVerification.anchor_pruned`). Events left at or below the newest checkpoint
    mean that the checkpoint was not made by pruning: broken there.
    """
    check_flag("seal", seal)
    if anchor is not None:
        anchor = check_anchor(anchor)
    if seal:
        seal_audit_trail(engine, tenant, settings=settings)
    with _snapshot(engine, tenant, settings) as uow:
        start, previous = uow.audit.checkpoint() or (0, AUDIT_GENESIS)
        head, head_hash = uow.audit.head()
        found = AuditVerification(
            tenant=tenant, checked=0, starts_after=start, head=head, unsealed=uow.audit.unsealed()
        )
        links = uow.audit.check_links(after_seq=start, previous=previous)
        broken = _left_below_checkpoint(uow, start) or _first_broken_link(uow, links, start)
        anchored = None if anchor is None else _anchored(uow, anchor, start)
    if anchor is not None and anchor[0] <= start:
        found = replace(found, anchor_pruned=True)
    broken = broken or anchored
    if broken is not None:
        at, link_problem = broken
        return replace(found, checked=at - start - 1, broken_at=at, problem=link_problem)
    problem = _broken_head(head, head_hash, links.last_seq, links.last_hash)
    broken_at = None if problem is None else links.last_seq + 1
    return replace(found, checked=links.count, broken_at=broken_at, problem=problem)


def _left_below_checkpoint(uow: UnitOfWork, start: int) -> tuple[int, str] | None:
    """A checkpoint with events still at or below it: not made by pruning.

    Pruning deletes them in the transaction that records the checkpoint.
    """
    left = uow.audit.sealed_through(start) if start else 0
    if not left:
        return None
    return start, (
        f"{left} event(s) at or below the checkpoint at {start} remain: the checkpoint was not "
        "made by pruning (forged?)"
    )


def _anchored(uow: UnitOfWork, anchor: tuple[int, bytes], start: int) -> tuple[int, str] | None:
    """Whether the anchored event still holds its hash (when pruning has not removed it)."""
    seq, expected = anchor
    if seq <= start:
        return None
    found = uow.audit.hash_at(seq)
    if found is None:
        return seq, f"the anchored event {seq} is gone, not by pruning (deleted?)"
    if found != expected:
        return seq, f"the anchored event {seq} does not hold the anchored hash: history rewritten"
    return None


def check_anchor(anchor: object) -> tuple[int, bytes]:
    """``anchor`` as (position, 32-byte hash), else :class:`~dms.errors.ValidationError`."""
    if (
        not isinstance(anchor, tuple)
        or len(anchor) != _ANCHOR_FIELDS
        or isinstance(anchor[0], bool)
        or not isinstance(anchor[0], int)
        or anchor[0] < 1
        or not isinstance(anchor[1], bytes)
        or len(anchor[1]) != _HASH_BYTES
    ):
        raise ValidationError(
            f"an anchor is (position >= 1, 32-byte hash) as dms audit head prints it, not "
            f"{shown(anchor)}"
        )
    return anchor[0], anchor[1]


_ANCHOR_FIELDS = 2
_HASH_BYTES = 32


def audit_head(
    engine: Engine, tenant: str, *, settings: Settings | None = None
) -> tuple[int, bytes]:
    """``tenant``'s chain head (position, hash), after sealing what is committed.

    The value to keep outside the database and give back to :func:`verify_audit_trail` as its
    anchor.
    """
    seal_audit_trail(engine, tenant, settings=settings)
    with _snapshot(engine, tenant, settings) as uow:
        return uow.audit.head()


def _first_broken_link(uow: UnitOfWork, links: Links, start: int) -> tuple[int, str] | None:
    """Where the first broken link is, and what is wrong there; ``None``: nowhere."""
    gap, forged = links.gap_at, links.forged_at
    if gap is not None and (forged is None or gap <= forged):
        missing = uow.audit.position_before(gap, after_seq=start) + 1
        return missing, f"event {missing} is missing: the chain goes on at {gap} (deleted?)"
    if forged is not None:
        event_id = uow.audit.event_at(forged)
        return forged, (
            f"event {forged} (id {event_id}) does not match its hash: changed, moved or forged "
            "(or a link before it was)"
        )
    return None


def _broken_head(head: int, head_hash: bytes, last: int, last_hash: bytes) -> str | None:
    if head > last:
        return f"the chain's head is at {head} but its last event is {last}: events were removed"
    if head < last:
        return f"events beyond the chain's head ({head}) up to {last}: forged"
    if head_hash != last_hash:
        return f"the chain's head does not match event {last}: changed"
    return None


def export_audit_trail(
    engine: Engine,
    tenant: str,
    out: TextIO,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    settings: Settings | None = None,
) -> int:
    """Write ``tenant``'s events from ``since`` to ``until`` to ``out`` as JSON lines.

    Oldest first, one consistent snapshot; returns how many were written.
    """
    if since is not None:
        check_timestamp("since", since)
    if until is not None:
        check_timestamp("until", until)
    written = 0
    with _snapshot(engine, tenant, settings) as uow:
        for event in uow.audit.exported(since=since, until=until):
            out.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")
            written += 1
    return written


def prune_audit_trail(
    engine: Engine,
    tenant: str,
    *,
    before: datetime,
    dry_run: bool = False,
    settings: Settings | None = None,
) -> AuditPruning:
    """Remove ``tenant``'s events older than ``before``, keeping the rest verifiable.

    Seals first; then, in one transaction, records a checkpoint (the position and hash of the
    last event removed, from which :func:`verify_audit_trail` starts) and deletes the events up
    to it. Unsealed events are never removed.
    """
    check_timestamp("before", before)
    check_flag("dry_run", dry_run)
    seal_audit_trail(engine, tenant, settings=settings)
    with UnitOfWork(engine, tenant=tenant, system=OPERATOR, settings=settings) as uow:
        cut = uow.audit.prunable(before)
        if cut is None:
            return AuditPruning(tenant=tenant, pruned=0, through=None, dry_run=dry_run)
        count, seq, hash_ = cut
        if not dry_run:
            count = uow.audit.prune_through(seq, hash_, count)
            uow.commit()
    return AuditPruning(tenant=tenant, pruned=count, through=seq, dry_run=dry_run)


@contextmanager
def _snapshot(engine: Engine, tenant: str, settings: Settings | None) -> Iterator[UnitOfWork]:
    # One snapshot for the whole read: a sealer committing meanwhile is not half seen.
    resolved = settings if settings is not None else settings_of(engine)
    snapshot = engine.execution_options(isolation_level="REPEATABLE READ")
    with UnitOfWork(snapshot, tenant=tenant, system=OPERATOR, settings=resolved) as uow:
        yield uow
