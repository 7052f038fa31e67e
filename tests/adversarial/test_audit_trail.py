"""The audit trail against the application role (finding 2 of the review, docs/security.md):
no checkpoint of one's own making, no sealing at a position that lets an event be deleted, and
a head kept outside the database that shows what happened since."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy.engine import Engine

from dms.audit import audit_head, prune_audit_trail, verify_audit_trail
from dms.errors import ValidationError
from tests.adversarial.conftest import World, raw_as, refused_as


def _checkpoint_at(seq: int, digest: bytes) -> str:
    """A checkpoint written by hand (``INSERT ... SELECT`` from the chain would be the same
    attack; Citus plans that form differently, so the values are read first)."""
    return (
        "INSERT INTO {s}.audit_checkpoints (seq, hash, pruned)"
        f" VALUES ({seq}, '\\x{digest.hex()}'::bytea, 0)"
    )


def _forged_at_head(engine: Engine, world: World) -> str:
    return _checkpoint_at(*audit_head(engine, world.tenant))


def test_a_user_cannot_make_a_checkpoint(engine: Engine, app_engine: Engine, world: World) -> None:
    assert refused_as(app_engine, world, world.eve, _forged_at_head(engine, world)) == "42501"


def test_a_checkpoint_is_a_sealed_event_with_its_hash(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    seq, _digest = audit_head(engine, world.tenant)

    with pytest.raises(Exception, match="a checkpoint is a sealed event"):
        raw_as(app_engine, world, "mallory", _checkpoint_at(seq, bytes(32)))


def test_a_checkpoint_that_pruned_nothing_breaks_the_verification(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    raw_as(app_engine, world, "mallory", _forged_at_head(engine, world))
    # Only the attacker's own events go; the rest stay below the checkpoint.
    erased = raw_as(
        app_engine,
        world,
        "mallory",
        f"DELETE FROM {{s}}.audit_events WHERE actor_id = '{world.eve}'",
    )

    report = verify_audit_trail(engine, world.tenant)

    assert erased >= 1
    assert not report.intact
    assert report.problem is not None
    assert "at or below the checkpoint" in report.problem


def test_an_event_cannot_be_sealed_out_of_the_chain_and_deleted(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    # A checkpoint exists (the trail was pruned once): an event at -1 would be "below" it.
    prune_audit_trail(engine, world.tenant, before=datetime.now(timezone.utc) + timedelta(days=1))
    rename_and_hide = (
        f"UPDATE {{s}}.documents SET title = 'hidden change' WHERE id = '{world.eve_doc}';"
        " UPDATE {s}.audit_events SET seq = -1, hash = '\\x00' WHERE seq IS NULL;"
        " DELETE FROM {s}.audit_events WHERE seq = -1"
    )

    sqlstate = refused_as(app_engine, world, world.eve, rename_and_hide)

    assert sqlstate == "23M05"
    assert verify_audit_trail(engine, world.tenant).intact


def test_an_anchor_kept_outside_shows_history_rewritten_or_pruned(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    seq, digest = audit_head(engine, world.tenant)
    raw_as(
        app_engine,
        world,
        world.eve,
        f"UPDATE {{s}}.documents SET title = 'later' WHERE id = '{world.eve_doc}'",
    )

    assert verify_audit_trail(engine, world.tenant, anchor=(seq, digest)).intact
    other = bytes(32) if digest != bytes(32) else b"\x01" * 32
    rewritten = verify_audit_trail(engine, world.tenant, anchor=(seq, other))
    assert not rewritten.intact
    assert rewritten.broken_at == seq

    prune_audit_trail(engine, world.tenant, before=datetime.now(timezone.utc) + timedelta(days=1))
    pruned = verify_audit_trail(engine, world.tenant, anchor=(seq, digest))
    assert pruned.anchor_pruned
    assert pruned.intact


@pytest.mark.parametrize(
    "anchor", [(0, bytes(32)), (1, b"short"), ("1", bytes(32)), (True, bytes(32)), [1, bytes(32)]]
)
def test_an_anchor_that_is_no_anchor_is_refused(
    engine: Engine, world: World, anchor: object
) -> None:
    with pytest.raises(ValidationError, match="an anchor is"):
        verify_audit_trail(engine, world.tenant, anchor=anchor)  # type: ignore[arg-type]
