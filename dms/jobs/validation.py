"""Checks of the queue's arguments, made before any SQL runs, and the caps they enforce.

Each check raises :class:`~dms.errors.ValidationError` (a :class:`~dms.errors.DmsError`) with
the offending value, so that a bad argument never reaches the driver.
"""

from __future__ import annotations

import json
from datetime import timedelta

from dms.errors import ValidationError

#: The longest lease accepted: far beyond any sensible one, and ``now() + lease`` stays a
#: timestamp PostgreSQL can store (a lease of millions of years would fail in the server).
MAX_LEASE = timedelta(days=365)
#: Longest kind, idempotency key and worker id, in characters.
MAX_NAME_CHARS = 200
#: Largest (and, negated, smallest) value of an ``integer`` column.
INT32 = 2**31 - 1


def require_name(field: str, value: object) -> None:
    """``value`` is a non-blank string of at most :data:`MAX_NAME_CHARS` characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
        raise ValidationError(
            f"{field} must be a non-blank string of at most {MAX_NAME_CHARS} characters, "
            f"not {value!r}"
        )


def require_int(field: str, value: object, *, minimum: int) -> None:
    """``value`` is an integer (not a bool) from ``minimum`` to :data:`INT32`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT32:
        raise ValidationError(
            f"{field} must be an integer from {minimum} to {INT32}, not {value!r}"
        )


#: Made once: ``json.dumps`` with a non-default option builds an encoder per call (1 µs).
_STRICT_JSON = json.JSONEncoder(allow_nan=False)


def require_json(payload: object) -> None:
    """``payload`` is JSON that ``jsonb`` can store."""
    try:
        text = _STRICT_JSON.encode(payload)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"payload is not JSON-serialisable: {exc}") from None
    # jsonb cannot store U+0000 and would reject it only at insert time.
    if "\\u0000" in text:
        raise ValidationError("payload contains the character U+0000, which jsonb cannot store")


def require_claim(worker_id: str, limit: int, lease: timedelta) -> None:
    """The arguments of a claim are valid."""
    require_name("worker_id", worker_id)
    require_int("limit", limit, minimum=1)
    validate_lease(lease)


def validate_lease(lease: object) -> timedelta:
    """Return ``lease`` if it is a positive timedelta of at most :data:`MAX_LEASE`.

    Raises :class:`~dms.errors.ValidationError` otherwise, before any SQL runs.
    """
    if not isinstance(lease, timedelta) or not timedelta(0) < lease <= MAX_LEASE:
        raise ValidationError(
            f"lease must be a timedelta above zero and at most {MAX_LEASE.days} days, not {lease!r}"
        )
    return lease
