"""The audit trail of a tenant: reading events, recording reads, settings, and the hash chain.

The events are written by the database (its triggers: dms/schema/sql/audit.sql), never by this
module, except a read (:meth:`AuditRepository.record_read`); what an inserted event says about who
and when is the database's own stamp either way. This module reads them, and holds the statements of
the chain: sealing (:meth:`~AuditRepository.seal`), the rows a verification walks, pruning.

The chain: sealing gives each unsealed event, in the order of its time, the next position
``seq`` and ``hash = sha256(previous hash || seq as 8 bytes || digest)``, where the digest is
the SHA-256 of the event's columns as one JSON array rendered by PostgreSQL (:data:`_DIGEST`:
deterministic text whatever the session's time zone). The server computes each event's digest
(in C, next to the data), so only 32 bytes per event travel; the chain itself is computed here,
in order. Verifying recomputes the same, so any change to an
event's content, position or order, a removed event or a forged one breaks a link
(:func:`chain_hash`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from dms.domain.audit import (
    ACTIONS,
    OBJECT_TYPES,
    AuditCursor,
    AuditEvent,
    AuditPage,
    AuditSettings,
    check_audit_cursor,
    check_choice,
    check_system,
)
from dms.domain.model import Revision
from dms.domain.search import check_page_size
from dms.domain.validation import check_flag, check_id, check_optional_id, check_timestamp
from dms.schema import tenant as t
from dms.schema.recordsets import recordset

from . import _recordset
from ._base import Repository

_e = t.audit_events
_chain = t.audit_chain
_checkpoints = t.audit_checkpoints
_settings = t.audit_settings

#: An event's content as the chain hashes it: every column but its place in the chain, as one
#: JSON array (PostgreSQL's ``jsonb`` text is canonical), the time spelled in UTC.
_PAYLOAD = sa.cast(
    sa.func.jsonb_build_array(
        _e.c.id,
        sa.func.to_char(sa.func.timezone("UTC", _e.c.occurred_at), 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        _e.c.txid,
        _e.c.actor_id,
        _e.c.actor_system,
        _e.c.db_role,
        _e.c.action,
        _e.c.object_type,
        _e.c.object_id,
        _e.c.document_id,
        _e.c.before,
        _e.c.after,
        _e.c.context,
    ),
    sa.Text,
)
#: What the chain hashes of an event: the SHA-256 of its payload's UTF-8 bytes.
_DIGEST = sa.func.sha256(sa.func.convert_to(_PAYLOAD, "UTF8")).label("digest")

_EVENT_COLUMNS = tuple(column for column in _e.c if column.name not in ("hash", "sealed_at"))
_NEWEST_FIRST = (_e.c.occurred_at.desc(), _e.c.id.desc())

#: Events a sealing statement writes at most.
SEAL_BATCH = 5000


@dataclass(frozen=True)
class Links:
    """What :meth:`AuditRepository.check_links` found after its starting position.

    ``count`` events up to position ``last_seq`` (whose hash is ``last_hash``); ``gap_at``: the
    first event whose predecessor is not the position before it; ``forged_at``: the first whose
    hash is not what its content and its predecessor's hash make (``None``: no such event).
    """

    count: int
    last_seq: int
    last_hash: bytes
    gap_at: int | None
    forged_at: int | None


#: Where an event sorts among the unsealed: (occurred_at, id).
EventKey = tuple[datetime, uuid.UUID]


@dataclass(frozen=True)
class Sealed:
    """What one sealing batch did: how many it sealed, and the key of the last one."""

    count: int
    last: EventKey | None


def chain_hash(previous: bytes, seq: int, digest: bytes) -> bytes:
    """The hash of the event at ``seq`` with ``digest``, after the hash ``previous``."""
    return hashlib.sha256(previous + seq.to_bytes(8, "big") + digest).digest()


class AuditRepository(Repository):
    """The tenant's audit trail."""

    def history(
        self, document_id: uuid.UUID, *, limit: int = 50, after: AuditCursor | None = None
    ) -> AuditPage:
        """One page of what happened to a document (its revisions, tags and values too).

        Newest first; pass the page's ``next_cursor`` as ``after`` for the next page.
        """
        check_id("document", document_id)
        return self._page([_e.c.document_id == document_id], limit=limit, after=after)

    def events(
        self,
        *,
        actor_id: uuid.UUID | None = None,
        system: str | None = None,
        action: str | None = None,
        object_type: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        after: AuditCursor | None = None,
    ) -> AuditPage:
        """One page of the tenant's events, newest first, filtered by who, what and when.

        ``since`` is inclusive and ``until`` exclusive; ``system`` names a system principal.
        """
        conditions: list[sa.ColumnElement[bool]] = []
        if check_optional_id("actor", actor_id) is not None:
            conditions.append(_e.c.actor_id == actor_id)
        if system is not None:
            conditions.append(_e.c.actor_system == check_system(system))
        if check_choice("action", action, ACTIONS) is not None:
            conditions.append(_e.c.action == action)
        if check_choice("object type", object_type, OBJECT_TYPES) is not None:
            conditions.append(_e.c.object_type == object_type)
        if since is not None:
            conditions.append(_e.c.occurred_at >= check_timestamp("since", since))
        if until is not None:
            conditions.append(_e.c.occurred_at < check_timestamp("until", until))
        return self._page(conditions, limit=limit, after=after)

    def _page(
        self,
        conditions: Sequence[sa.ColumnElement[bool]],
        *,
        limit: int,
        after: AuditCursor | None,
    ) -> AuditPage:
        check_page_size(limit)
        if check_audit_cursor(after) is not None:
            assert after is not None  # noqa: S101 (checked just above)
            conditions = [
                *conditions,
                sa.tuple_(_e.c.occurred_at, _e.c.id) < (after.occurred_at, after.id),
            ]
        statement = (
            sa.select(*_EVENT_COLUMNS).where(*conditions).order_by(*_NEWEST_FIRST).limit(limit + 1)
        )
        rows = list(self._execute(statement))
        items = [_event(row) for row in rows[:limit]]
        last = items[-1] if len(rows) > limit else None
        cursor = None if last is None else AuditCursor(occurred_at=last.occurred_at, id=last.id)
        return AuditPage(items=items, next_cursor=cursor)

    def settings(self) -> AuditSettings:
        """The tenant's audit settings (the defaults until someone sets them)."""
        row = self._execute(sa.select(_settings.c.record_reads)).first()
        return AuditSettings() if row is None else AuditSettings(record_reads=row.record_reads)

    def set_record_reads(self, record_reads: bool) -> None:
        """Record (or stop recording) reading a revision's content, from this transaction on."""
        check_flag("record_reads", record_reads)
        statement = insert(_settings).values(singleton=True, record_reads=record_reads)
        self._execute(
            statement.on_conflict_do_update(
                index_elements=[_settings.c.singleton],
                set_={"record_reads": statement.excluded.record_reads},
            )
        )

    def record_read(self, revision: Revision) -> None:
        """Record that the unit's actor read ``revision``'s content."""
        self._execute(
            # Who, when and in which transaction: stamped by the database (trigger audit_stamp).
            sa.insert(_e).values(
                action="read",
                object_type="revision",
                object_id=revision.id,
                document_id=revision.document_id,
                after={"revision_no": revision.revision_no, "sha256": revision.sha256},
            )
        )

    # The chain. Sealing runs in its own transactions (dms.audit), one batch each.

    def lock_head(self) -> tuple[int, bytes]:
        """Lock the chain's head for this transaction and return its (position, hash).

        Sealers wait on each other here; writers never take this lock.
        """
        row = self._execute(
            sa.select(_chain.c.last_seq, _chain.c.last_hash).with_for_update()
        ).one()
        return int(row.last_seq), bytes(row.last_hash)

    def head(self) -> tuple[int, bytes]:
        """The chain's head (position, hash), unlocked."""
        row = self._execute(sa.select(_chain.c.last_seq, _chain.c.last_hash)).one()
        return int(row.last_seq), bytes(row.last_hash)

    def seal(self, limit: int = SEAL_BATCH, *, after: EventKey | None = None) -> Sealed:
        """Seal up to ``limit`` unsealed events after the head (locked first), oldest first.

        ``after``: only events after this key (the ``last`` of the previous batch of the same
        run). Sealed rows stay in the unsealed index until a vacuum; a run that started every
        batch from the beginning would walk past all it had sealed, batch after batch.
        """
        seq, previous = self.lock_head()
        unsealed = sa.select(_e.c.id, _e.c.occurred_at).where(_e.c.seq.is_(None))
        if after is not None:
            unsealed = unsealed.where(sa.tuple_(_e.c.occurred_at, _e.c.id) > after)
        picked = unsealed.order_by(_e.c.occurred_at, _e.c.id).limit(limit).subquery("picked")
        rows = self._execute(_digests_of(picked, picked.c.occurred_at, picked.c.id)).all()
        if not rows:
            return Sealed(count=0, last=after)
        sealed = []
        for row in rows:
            seq += 1
            previous = chain_hash(previous, seq, bytes(row.digest))
            sealed.append({"id": row.id, "seq": seq, "hash": previous.hex()})
        batch = recordset(
            "sealed", [("id", sa.Uuid()), ("seq", sa.BigInteger()), ("hash", sa.Text())]
        )
        self._execute(
            sa.update(_e)
            .where(_e.c.id == batch.c.id)
            .values(
                seq=batch.c.seq, hash=sa.func.decode(batch.c.hash, "hex"), sealed_at=sa.func.now()
            ),
            {"sealed": _recordset.encode(sealed)},
        )
        self._execute(
            sa.update(_chain).values(last_seq=seq, last_hash=previous, sealed_at=sa.func.now())
        )
        return Sealed(count=len(rows), last=(rows[-1].occurred_at, rows[-1].id))

    def oldest_unsealed(self) -> uuid.UUID | None:
        """The id of the oldest event not sealed yet (the next a sealer takes); ``None``: none.

        One probe of the partial index ``ix_audit_events_unsealed``: what the sealing sweep
        asks of every tenant (:mod:`dms.sealing`), so it must cost next to nothing when the
        answer is none.
        """
        oldest: uuid.UUID | None = self._execute(
            sa.select(_e.c.id)
            .where(_e.c.seq.is_(None))
            .order_by(_e.c.occurred_at, _e.c.id)
            .limit(1)
        ).scalar_one_or_none()
        return oldest

    def unsealed(self) -> int:
        """How many events are not sealed yet."""
        return int(self._execute(sa.select(sa.func.count()).where(_e.c.seq.is_(None))).scalar_one())

    def checkpoint(self) -> tuple[int, bytes] | None:
        """The newest checkpoint (position, hash), where the chain now starts; else ``None``."""
        row = self._execute(
            sa.select(_checkpoints.c.seq, _checkpoints.c.hash)
            .order_by(_checkpoints.c.seq.desc())
            .limit(1)
        ).first()
        return None if row is None else (int(row.seq), bytes(row.hash))

    def check_links(self, *, after_seq: int, previous: bytes) -> Links:
        """Recompute every link of the chain after ``after_seq``, whose hash is ``previous``.

        Set-based, in one pass on the server: each event's hash is recomputed from its own
        content and its predecessor's stored hash (:data:`_LINK`, the same rule as
        :func:`chain_hash`, written a second time on purpose: a verification that shared the
        sealer's code would not notice the sealer's mistakes). Only what is wrong travels.
        """
        step = _e.c.seq - sa.func.lag(_e.c.seq, 1, after_seq).over(order_by=_e.c.seq)
        before = sa.func.lag(_e.c.hash, 1, sa.literal(previous, sa.LargeBinary)).over(
            order_by=_e.c.seq
        )
        expected = sa.func.sha256(before.op("||")(sa.func.int8send(_e.c.seq)).op("||")(_DIGEST))
        links = (
            sa.select(_e.c.seq, step.label("step"), (expected != _e.c.hash).label("forged"))
            .where(_e.c.seq > after_seq)
            .subquery("links")
        )
        found = self._execute(
            sa.select(
                sa.func.count().label("events"),
                sa.func.max(links.c.seq).label("last"),
                sa.func.min(links.c.seq).filter(links.c.step != 1).label("gap"),
                sa.func.min(links.c.seq).filter(links.c.forged).label("forged"),
            )
        ).one()
        last = after_seq if found.last is None else int(found.last)
        return Links(
            count=int(found.events),
            last_seq=last,
            last_hash=previous if last == after_seq else self._hash_at(last),
            gap_at=found.gap,
            forged_at=found.forged,
        )

    def _hash_at(self, seq: int) -> bytes:
        return bytes(self._execute(sa.select(_e.c.hash).where(_e.c.seq == seq)).scalar_one())

    def event_at(self, seq: int) -> uuid.UUID:
        """The id of the event at position ``seq``."""
        event_id: uuid.UUID = self._execute(sa.select(_e.c.id).where(_e.c.seq == seq)).scalar_one()
        return event_id

    def sealed_through(self, seq: int) -> int:
        """How many sealed events sit at or below position ``seq`` (a checkpoint's: none)."""
        return int(
            self._execute(
                sa.select(sa.func.count()).where(_e.c.seq.is_not(None), _e.c.seq <= seq)
            ).scalar_one()
        )

    def hash_at(self, seq: int) -> bytes | None:
        """The hash of the event at position ``seq``; ``None`` if there is none."""
        found = self._execute(sa.select(_e.c.hash).where(_e.c.seq == seq)).scalar_one_or_none()
        return None if found is None else bytes(found)

    def position_before(self, seq: int, *, after_seq: int) -> int:
        """The position of the last event before ``seq`` (``after_seq`` if there is none)."""
        found = self._execute(
            sa.select(sa.func.max(_e.c.seq)).where(_e.c.seq < seq, _e.c.seq > after_seq)
        ).scalar_one()
        return after_seq if found is None else int(found)

    def exported(
        self, *, since: datetime | None, until: datetime | None, batch: int = 10_000
    ) -> Iterator[dict[str, Any]]:
        """Every event from ``since`` (inclusive) to ``until`` (exclusive), oldest first.

        Each as a JSON-ready mapping (ids as text, the hash in hex), read in pages.
        """
        conditions = []
        if since is not None:
            conditions.append(_e.c.occurred_at >= check_timestamp("since", since))
        if until is not None:
            conditions.append(_e.c.occurred_at < check_timestamp("until", until))
        key: tuple[datetime, uuid.UUID] | None = None
        columns = (*_EVENT_COLUMNS, _e.c.hash)
        while True:
            statement = sa.select(*columns).where(*conditions)
            if key is not None:
                statement = statement.where(sa.tuple_(_e.c.occurred_at, _e.c.id) > key)
            rows = self._execute(statement.order_by(_e.c.occurred_at, _e.c.id).limit(batch)).all()
            for row in rows:
                yield _exported(row)
            if len(rows) < batch:
                return
            key = (rows[-1].occurred_at, rows[-1].id)

    def prunable(self, before: datetime) -> tuple[int, int, bytes] | None:
        """What pruning before ``before`` would remove: (events, last position, its hash).

        The sealed events up to the first one at or after ``before`` (positions follow sealing,
        and a long transaction's events can be sealed after younger ones: the cut stops at the
        first young one, so nothing at or after ``before`` is removed); ``None``: nothing.
        """
        check_timestamp("before", before)
        first_kept = (
            sa.select(sa.func.min(_e.c.seq))
            .where(_e.c.seq.is_not(None), _e.c.occurred_at >= before)
            .scalar_subquery()
        )
        last = self._execute(
            sa.select(_e.c.seq, _e.c.hash)
            .where(
                _e.c.seq.is_not(None),
                sa.or_(first_kept.is_(None), _e.c.seq < first_kept),
            )
            .order_by(_e.c.seq.desc())
            .limit(1)
        ).first()
        if last is None:
            return None
        count = self._execute(sa.select(sa.func.count()).where(_e.c.seq <= last.seq)).scalar_one()
        return int(count), int(last.seq), bytes(last.hash)

    def prune_through(self, seq: int, hash_: bytes, count: int) -> int:
        """Anchor the chain at ``seq`` (a checkpoint), then delete the events up to it."""
        self._execute(sa.insert(_checkpoints).values(seq=seq, hash=hash_, pruned=count))
        return int(self._execute(sa.delete(_e).where(_e.c.seq <= seq)).rowcount)


def _digests_of(picked: sa.Subquery, *order: sa.ColumnElement[Any]) -> sa.Select[Any]:
    """The events of ``picked`` (a subquery of ids) with their digests, in ``order``.

    The digest is computed for the picked rows only: in one query with the filter, the planner
    may compute it for every candidate row before it sorts and cuts them (it did, for an
    unanalysed table, four times over).
    """
    return (
        sa.select(_e.c.id, _e.c.occurred_at, _e.c.seq, _e.c.hash, _DIGEST)
        .join_from(picked, _e, _e.c.id == picked.c.id)
        .order_by(*order)
    )


def _event(row: sa.Row[Any]) -> AuditEvent:
    return AuditEvent(**{column.name: row._mapping[column.name] for column in _EVENT_COLUMNS})


def _exported(row: sa.Row[Any]) -> dict[str, Any]:
    values = dict(row._mapping)
    values["occurred_at"] = values["occurred_at"].isoformat()
    for name in ("id", "actor_id", "object_id", "document_id"):
        if values[name] is not None:
            values[name] = str(values[name])
    if values["hash"] is not None:
        values["hash"] = bytes(values["hash"]).hex()
    return values
