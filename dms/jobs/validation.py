"""Checks of the queue's arguments, made before any SQL runs, and the caps they enforce.

Every value a caller gives :mod:`dms.jobs` is either stored intact (and reads back equal) or
refused here with :class:`~dms.errors.ValidationError` (a :class:`~dms.errors.DmsError`)
naming the argument, before it reaches the driver. What PostgreSQL cannot store is refused:
NUL in text, lone surrogates (a ``str`` can hold them, UTF-8 cannot), JSON that ``jsonb`` would
change. The caps are documented in ``docs/jobs.md``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from json.encoder import encode_basestring
from typing import Any

from dms.domain.validation import shown, unstorable
from dms.errors import ValidationError
from dms.jobs.model import Job

#: The longest lease accepted: far beyond any sensible one, and ``now() + lease`` stays a
#: timestamp PostgreSQL can store (a lease of millions of years would fail in the server).
MAX_LEASE = timedelta(days=365)
#: Longest kind, idempotency key and worker id, in characters.
MAX_NAME_CHARS = 200
#: Largest (and, negated, smallest) value of an ``integer`` column.
INT32 = 2**31 - 1
#: Longest payload, in characters of its JSON text: a payload names the work (ids, options);
#: the data itself belongs in the tenant's tables or in blob storage.
MAX_PAYLOAD_CHARS = 1_000_000
#: Deepest nesting of arrays and objects in a payload. Far beyond any real payload, and far
#: below the depth at which Python's ``json`` (encoding, and decoding a claim) would recurse
#: out of stack.
MAX_PAYLOAD_DEPTH = 100
#: Longest time an idempotency key may be remembered (``key_retention``): ten years.
MAX_KEY_RETENTION = timedelta(days=3650)
#: Longest age a filter (``older_than``) may name: a century, so that ``now() - older_than``
#: stays a timestamp PostgreSQL can store.
MAX_AGE = timedelta(days=36500)
#: Smallest magnitude of a float that ``jsonb`` gives back as an integer: PostgreSQL writes
#: ``1e+23`` as ``100000000000000000000000``, which is not the float 1e23.
_FLOAT_AS_INTEGER = 1e16

_SURROGATE = re.compile("[\ud800-\udfff]")
#: ``\u0000`` in JSON text, unless its backslash is itself escaped (the text ``\\u0000``).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
#: An exponent in JSON text: where a float of :data:`_FLOAT_AS_INTEGER` or more may be.
_LARGE_EXPONENT = re.compile(r"[0-9]e\+[0-9]")
#: Made once: ``json.dumps`` with non-default options builds an encoder per call (1 µs).
#: Surrogates are written as themselves, so that they can be told from astral characters.
_STRICT_JSON = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
#: The C encoder's constructor (``None`` without the accelerator), called with the arguments
#: that ``JSONEncoder.iterencode`` gives it for :data:`_STRICT_JSON`, unchanged from Python
#: 3.6 to 3.13 (a test compares the two encoders' results).
_make_encoder: Callable[..., Callable[[object, int], Iterable[str]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)


def require_name(field: str, value: object) -> str:
    """``value`` is a non-blank storable string of at most :data:`MAX_NAME_CHARS` characters."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
        raise ValidationError(
            f"{field} must be a non-blank string of at most {MAX_NAME_CHARS} characters, "
            f"not {shown(value)}"
        )
    problem = unstorable(value)
    if problem is not None:
        raise ValidationError(f"{field} {shown(value)} contains {problem}, which cannot be stored")
    return value


def require_names(field: str, values: object) -> list[str]:
    """``values`` is a collection (not a string) of valid names (:func:`require_name`)."""
    if isinstance(values, str | bytes) or not isinstance(values, Collection):
        raise ValidationError(
            f"{field} must be a collection of names such as a list, not {shown(values)}"
        )
    return [require_name(field, value) for value in values]


def require_optional_name(field: str, value: object) -> str | None:
    """``None``, or a valid name (:func:`require_name`)."""
    return None if value is None else require_name(field, value)


def require_int(field: str, value: object, *, minimum: int) -> int:
    """``value`` is an integer (not a bool) from ``minimum`` to :data:`INT32`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT32:
        raise ValidationError(
            f"{field} must be an integer from {minimum} to {INT32}, not {shown(value)}"
        )
    return value


def require_duration(
    field: str, value: object, *, maximum: timedelta, zero: bool = False
) -> timedelta:
    """``value`` is a timedelta above zero (or from zero, with ``zero``) up to ``maximum``."""
    lowest = timedelta(0) if zero else timedelta(microseconds=1)
    if isinstance(value, timedelta) and lowest <= value <= maximum:
        return value
    bound = "from zero" if zero else "above zero"
    raise ValidationError(
        f"{field} must be a timedelta {bound} and at most {maximum.days} days, not {shown(value)}"
    )


def require_job_id(value: object) -> uuid.UUID:
    """``value`` is a :class:`uuid.UUID` (a job's id)."""
    if not isinstance(value, uuid.UUID):
        raise ValidationError(f"job_id must be a uuid.UUID, not {shown(value)}")
    return value


def require_run_at(value: object) -> datetime:
    """``value`` is a timezone-aware datetime whose instant is within years 1 to 9999 UTC.

    The offset itself may be anything Python allows: the instant is sent in UTC, so offsets
    beyond PostgreSQL's ±15:59 do not matter.
    """
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValidationError(f"run_at must be a timezone-aware datetime, not {shown(value)}")
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValidationError(
            f"run_at {value.isoformat()} is outside the years 1 to 9999 in UTC"
        ) from None


def require_json(payload: object) -> str:
    r"""``payload`` is JSON that ``jsonb`` stores and gives back equal; return its JSON text.

    Refused: what is not JSON (bytes, sets, NaN, ...), what JSON would change (tuples, keys
    that are not strings), ``None`` (``jsonb`` cannot tell a missing payload from ``null``
    here), NUL and lone surrogates, floats of 1e16 or more (``jsonb`` gives them back as
    integers), and more than :data:`MAX_PAYLOAD_CHARS` characters or :data:`MAX_PAYLOAD_DEPTH`
    levels. The text ``\\u0000`` (a backslash, then ``u0000``) is fine.
    """
    try:
        text = flat_json(payload)
    except ValueError as exc:  # an int of more digits than Python writes
        raise ValidationError(f"payload is not JSON-serialisable: {exc}") from None
    if text is None:
        return _require_encoded(payload)
    # The text checks only where they might find something (a call saved per job).
    if len(text) > MAX_PAYLOAD_CHARS or "\\u0000" in text or not text.isascii():
        _require_payload_text(text)
    return text


def _require_encoded(payload: object) -> str:
    """:func:`require_json` of a payload that is not flat (:func:`flat_json`): encode, decode."""
    if payload is None:
        raise ValidationError("payload must not be None: use {} for a job without arguments")
    try:
        text = strict_json(payload)
    except RecursionError:
        raise ValidationError(f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels") from None
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"payload is not JSON-serialisable: {exc}") from None
    _require_payload_text(text)
    try:
        decoded = json.loads(text)
    except RecursionError:
        raise ValidationError(f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels") from None
    _require_payload_value(payload, decoded, text)
    return text


def strict_json(value: object) -> str:
    """``value`` as JSON text, as :data:`_STRICT_JSON` writes it (errors included).

    Through the C encoder that ``JSONEncoder.encode`` itself builds, built here directly: the
    method's Python layers (``encode``, ``iterencode``) cost 0.9 µs of the 1.5 µs a small
    payload takes, once per enqueued job. A new ``markers`` dict per call (the circular
    reference check) keeps it thread-safe, as the method's own.
    """
    if _make_encoder is None:  # an interpreter without the C accelerator
        return _STRICT_JSON.encode(value)
    encode = _make_encoder(
        {},
        _STRICT_JSON.default,
        encode_basestring,
        None,
        _STRICT_JSON.key_separator,
        _STRICT_JSON.item_separator,
        False,
        False,
        False,
    )
    return "".join(encode(value, 0))


#: How :func:`flat_json` writes each type of value it takes, as :data:`_STRICT_JSON` writes it.
#: Exact types only: JSON gives their values back equal and as the same type (a subclass
#: such as an ``IntEnum`` member is written as its base type's value), so a payload of them
#: needs no decoding to compare.
_FLAT_VALUES: dict[type, Callable[[Any], str]] = {
    str: encode_basestring,
    int: int.__repr__,
    bool: ("false", "true").__getitem__,
    type(None): {None: "null"}.__getitem__,
}


def flat_json(payload: object) -> str | None:
    """The JSON text of the usual payload, a dict of ``str`` keys to plain values, else ``None``.

    The same text as :func:`strict_json` (a test compares them), written without the encoder:
    building the C encoder and joining its pieces cost 1.3 µs for ``{"n": 1}``, once per
    enqueued job; this costs a third of it. Such a payload reads back equal once encoded: no
    tuple, no key that JSON would make a string, no nesting, no float (one of 1e16 or more
    would read back as an int), so decoding it again, to compare, is not needed either; its
    text is still checked for NUL and lone surrogates. An ``int`` of more digits than Python
    writes raises :class:`ValueError`, as from the encoder.
    """
    if type(payload) is not dict:
        return None
    items = []
    for key, value in payload.items():
        write = _FLAT_VALUES.get(type(value))
        if write is None or type(key) is not str:
            return None
        items.append(f"{encode_basestring(key)}: {write(value)}")
    return "{" + ", ".join(items) + "}"


def _require_payload_text(text: str) -> None:
    if len(text) > MAX_PAYLOAD_CHARS:
        raise ValidationError(
            f"payload is {len(text)} characters of JSON, more than {MAX_PAYLOAD_CHARS}"
        )
    # Substring tests first: they run in C, the regular expressions only when they might match.
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValidationError("payload contains the character U+0000, which jsonb cannot store")
    if not text.isascii() and _SURROGATE.search(text):
        raise ValidationError("payload contains a lone surrogate, which jsonb cannot store")


def _require_payload_value(payload: object, decoded: object, text: str) -> None:
    # Only a payload with that many brackets (in its text, strings included) can be that deep.
    if text.count("[") + text.count("{") > MAX_PAYLOAD_DEPTH and _too_deep(decoded):
        raise ValidationError(f"payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
    if "e+" in text and _LARGE_EXPONENT.search(text) and _has_large_float(decoded):
        raise ValidationError(
            f"payload holds a float of {_FLOAT_AS_INTEGER:g} or more, which jsonb gives back "
            "as an integer: pass an int or a string"
        )
    if decoded != payload:
        raise ValidationError(
            "payload would not read back equal: JSON makes tuples lists and keys strings"
        )


def _children(value: object) -> Collection[Any]:
    if isinstance(value, dict):
        return value.values()
    if isinstance(value, list):
        return value
    return ()


def _too_deep(value: object) -> bool:
    """Whether ``value`` (decoded JSON) nests more than :data:`MAX_PAYLOAD_DEPTH` levels."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = _children(item)
        if children and depth > MAX_PAYLOAD_DEPTH:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def _has_large_float(value: object) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and abs(item) >= _FLOAT_AS_INTEGER:
            return True
        pending.extend(_children(item))
    return False


def require_claimed(job: object) -> Job:
    """``job`` is a :class:`~dms.jobs.model.Job` as a claim returned it: its fence is valid.

    The fence (``id``, ``locked_by``, ``attempts``) is what the settling statement matches; a
    job that was never claimed has no fence to match.
    """
    if not isinstance(job, Job):
        raise ValidationError(f"job must be a dms.jobs.Job, not {shown(job)}")
    require_job_id(job.id)
    if job.locked_by is None:
        raise ValidationError(f"job {job.id} was not claimed: settle the Job a claim returned")
    require_name("locked_by", job.locked_by)
    require_int("attempts", job.attempts, minimum=1)
    return job


def require_claimed_batch(batch: object) -> Sequence[Job]:
    """``batch`` is a sequence of distinct claimed jobs (:func:`require_claimed`)."""
    if isinstance(batch, str | bytes) or not isinstance(batch, Sequence):
        raise ValidationError(f"batch must be a sequence of jobs, not {shown(batch)}")
    workers = set()
    for job in batch:
        if not isinstance(job, Job) or job.locked_by not in workers:
            require_claimed(job)
            workers.add(job.locked_by)
            continue
        # The worker id was checked with an earlier job: the rest of the fence only.
        require_job_id(job.id)
        require_int("attempts", job.attempts, minimum=1)
    # Integer ids: hashing a UUID object runs Python code.
    if len({job.id.int for job in batch}) != len(batch):
        raise ValidationError("complete_many: a job appears more than once in the batch")
    return batch


def require_claim(worker_id: object, kinds: object, limit: object, lease: object) -> None:
    """The arguments of a claim are valid."""
    require_name("worker_id", worker_id)
    if kinds is not None:
        require_names("kinds", kinds)
    require_int("limit", limit, minimum=1)
    validate_lease(lease)


def validate_lease(lease: object) -> timedelta:
    """Return ``lease`` if it is a positive timedelta of at most :data:`MAX_LEASE`.

    Raises :class:`~dms.errors.ValidationError` otherwise, before any SQL runs.
    """
    if not isinstance(lease, timedelta) or not timedelta(0) < lease <= MAX_LEASE:
        raise ValidationError(
            f"lease must be a timedelta above zero and at most {MAX_LEASE.days} days, "
            f"not {shown(lease)}"
        )
    return lease
