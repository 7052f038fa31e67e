"""The audit trail as the domain sees it: events, who acts, the caller's context, and checks.

Who acts is decided once per unit of work (``UnitOfWork(user_id=...)`` or
``UnitOfWork(system=...)``) and travels to the database as the transaction-local setting
:data:`ACTOR_SETTING`, which the audit triggers read (and the access policies of issue 25 will
read): a user's id, or ``system:<name>`` for a named system principal (a worker, an operator
command). The caller's context (a request id, a client address) travels as
:data:`CONTEXT_SETTING`, a JSON object that every event of the transaction keeps.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dms.errors import ValidationError

from .validation import check_text, shown

#: The transaction-local setting that names who acts (read by the audit triggers).
ACTOR_SETTING = "dms.actor"
#: The transaction-local setting that carries the caller's context (a JSON object).
CONTEXT_SETTING = "dms.context"
#: How a system principal is spelled in :data:`ACTOR_SETTING`.
SYSTEM_PREFIX = "system:"

#: The system principal of the job worker's units of work.
WORKER = "worker"
#: The system principal of operator commands (``dms ...``) that act on a tenant's data.
OPERATOR = "operator"

_SYSTEM_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,62}")
_CONTEXT_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
#: At most this many keys in a context, each value at most this many characters.
CONTEXT_MAX_KEYS = 16
CONTEXT_VALUE_MAX_CHARS = 1000

#: What an event records: ``create``, ``update``, ``delete`` of a row; ``trash`` and
#: ``restore`` (a document or folder into the trash and back); ``link`` (a set of links
#: changed: a document's tags, a multi-select value's choices); ``read`` (a revision's
#: content, when the tenant records reads).
ACTIONS = ("create", "update", "delete", "trash", "restore", "link", "read")
#: What an event is about.
OBJECT_TYPES = (
    "document",
    "revision",
    "folder",
    "tag",
    "metadata_field",
    "metadata_option",
    "metadata_value",
    # Access control (docs/access.md): an entry granted, changed or revoked; a group; a
    # membership (its object is the group).
    "access_entry",
    "group",
    "group_member",
    # A tenant's settings: recording reads, the text search configuration (no object id).
    "audit_setting",
    "search_setting",
)


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One recorded change (or read), as the database stamped it.

    ``actor_id`` is the user who acted, or ``actor_system`` the system principal (neither when
    the change came through a connection that named no actor: raw SQL, then ``db_role`` says
    which database role). ``before`` and ``after`` hold the changed columns (an update), the
    whole row (a create or delete) or the whole set (a ``link``). ``seq`` is the event's place
    in the tenant's hash chain, ``None`` until it is sealed.
    """

    id: uuid.UUID
    occurred_at: datetime
    txid: int
    actor_id: uuid.UUID | None
    actor_system: str | None
    db_role: str
    action: str
    object_type: str
    object_id: uuid.UUID | None
    document_id: uuid.UUID | None
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    context: Mapping[str, Any] | None
    seq: int | None


@dataclass(frozen=True, kw_only=True)
class AuditCursor:
    """Where a page of events ended: pass as ``after`` for the next page (newest first)."""

    occurred_at: datetime
    id: uuid.UUID


@dataclass(frozen=True, kw_only=True)
class AuditPage:
    """One page of events, newest first; ``next_cursor`` is ``None`` on the last page."""

    items: Sequence[AuditEvent]
    next_cursor: AuditCursor | None


@dataclass(frozen=True, kw_only=True)
class AuditSettings:
    """A tenant's audit settings: ``record_reads`` records reading a revision's content."""

    record_reads: bool = False


def check_system(name: object) -> str:
    """Return ``name`` if it is a valid system principal name, else raise."""
    if not isinstance(name, str) or not _SYSTEM_NAME.fullmatch(name):
        raise ValidationError(
            f"a system principal is 1 to 63 characters a-z, 0-9, '_', '.', '-' starting with a "
            f"letter, not {shown(name)}"
        )
    return name


def actor_setting(user_id: uuid.UUID | None, system: str | None) -> str | None:
    """The value of :data:`ACTOR_SETTING` for a user or a system principal (both: refused)."""
    if user_id is not None and system is not None:
        raise ValidationError("a unit of work acts as a user or as a system principal, not both")
    if system is not None:
        return SYSTEM_PREFIX + check_system(system)
    return None if user_id is None else str(user_id)


def check_context(context: object) -> str | None:
    """Return ``context`` as the JSON text of :data:`CONTEXT_SETTING`, or raise.

    A context is a mapping of at most :data:`CONTEXT_MAX_KEYS` names (a letter, then letters,
    digits, ``_``, ``.``, ``-``; at most 64) to strings, ints, bools or ``None``: values that
    read back exactly as they were given (a float may not, through ``jsonb``'s numbers).
    """
    if context is None:
        return None
    if not isinstance(context, Mapping):
        raise ValidationError(f"an audit context is a mapping, not {shown(context)}")
    if len(context) > CONTEXT_MAX_KEYS:
        raise ValidationError(f"an audit context has at most {CONTEXT_MAX_KEYS} keys")
    for key, value in context.items():
        if not isinstance(key, str) or not _CONTEXT_KEY.fullmatch(key):
            raise ValidationError(f"invalid audit context key {shown(key)}")
        _check_context_value(key, value)
    return json.dumps(dict(context), separators=(",", ":"), sort_keys=True)


def _check_context_value(key: str, value: object) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValidationError(f"audit context {key!r}: {shown(value)} is out of range")
        return
    if isinstance(value, str):
        check_text(f"audit context {key!r}", value)
        if len(value) > CONTEXT_VALUE_MAX_CHARS:
            raise ValidationError(
                f"audit context {key!r} is longer than {CONTEXT_VALUE_MAX_CHARS} characters"
            )
        return
    raise ValidationError(f"audit context {key!r}: a string, int, bool or None, not {shown(value)}")


def check_audit_cursor(after: object) -> AuditCursor | None:
    """Return ``after`` if it is ``None`` or an :class:`AuditCursor`, else raise."""
    if after is None:
        return None
    if (
        not isinstance(after, AuditCursor)
        or not isinstance(after.occurred_at, datetime)
        or after.occurred_at.tzinfo is None
        or not isinstance(after.id, uuid.UUID)
    ):
        raise ValidationError(f"a page of events starts after an AuditCursor, not {shown(after)}")
    return after


def check_choice(what: str, value: object, choices: Sequence[str]) -> str | None:
    """Return ``value`` if it is ``None`` or one of ``choices``, else raise."""
    if value is None or (isinstance(value, str) and value in choices):
        return value
    raise ValidationError(f"{what} is one of {', '.join(choices)}, not {shown(value)}")
