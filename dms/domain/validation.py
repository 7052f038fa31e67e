"""Checks of user input that run before any SQL, raising :class:`~dms.errors.ValidationError`.

The database enforces the same rules (CHECK constraints); checking here first gives messages
that name the field and the value, and keeps a doomed statement off the wire.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from dms.errors import ValidationError

from .model import FieldOption, FieldType, MetadataField, MetadataValue

#: Range of PostgreSQL ``bigint``, the column of int values.
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
#: Decimal values keep at most this many significant digits ...
DECIMAL_MAX_DIGITS = 38
#: ... of which at most this many after the point.
DECIMAL_MAX_SCALE = 10
#: Longest ``string`` value; longer prose belongs in a ``text`` field.
STRING_MAX_CHARS = 1000
TEXT_MAX_CHARS = 100_000
URL_MAX_CHARS = 2000

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MIME_TYPE = re.compile(r"[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*.*")
_URL = re.compile(r"https?://[^\s/?#]+[^\s]*")


def check_name(kind: str, name: object, *, max_chars: int, slash_allowed: bool = True) -> str:
    """Return ``name`` if it is a non-blank string of at most ``max_chars`` characters."""
    if not isinstance(name, str):
        raise ValidationError(f"{kind} name must be a string, not {type(name).__name__}")
    if not name.strip():
        raise ValidationError(f"{kind} name must not be blank: {name!r}")
    if len(name) > max_chars:
        raise ValidationError(f"{kind} name {name[:40]!r}... is longer than {max_chars} characters")
    if not slash_allowed and "/" in name:
        raise ValidationError(f"{kind} name {name!r} must not contain '/'")
    return name


def check_revision(
    *, storage_key: object, sha256: object, size_bytes: object, mime_type: object
) -> None:
    """Check the description of an uploaded file before it becomes a revision."""
    if not isinstance(storage_key, str) or not storage_key.strip():
        raise ValidationError(f"storage key must be a non-blank string, not {storage_key!r}")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ValidationError(f"sha256 must be 64 lowercase hex digits, not {sha256!r}")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValidationError(f"size_bytes must be an int >= 0, not {size_bytes!r}")
    if size_bytes > INT_MAX:
        raise ValidationError(f"size_bytes {size_bytes} is too large")
    if not isinstance(mime_type, str) or not _MIME_TYPE.fullmatch(mime_type):
        raise ValidationError(f"mime type must look like 'type/subtype', not {mime_type!r}")


def check_value(field: MetadataField, value: object) -> MetadataValue:
    """Return ``value`` converted for ``field``, or raise :class:`ValidationError`.

    Select values may name an active option by id or by its text (ignoring case); they come
    back as option ids.
    """
    checker = _CHECKERS[field.field_type]
    return checker(field, value)


def _fail(field: MetadataField, value: object, expected: str) -> ValidationError:
    return ValidationError(
        f"metadata field {field.name!r} ({field.field_type.value}) needs {expected}, not {value!r}"
    )


def _check_string(field: MetadataField, value: object) -> MetadataValue:
    limit = STRING_MAX_CHARS if field.field_type is FieldType.STRING else TEXT_MAX_CHARS
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise _fail(field, value, f"a non-blank string of at most {limit} characters")
    return value


def _check_int(field: MetadataField, value: object) -> MetadataValue:
    if isinstance(value, bool) or not isinstance(value, int) or not INT_MIN <= value <= INT_MAX:
        raise _fail(field, value, f"an int from {INT_MIN} to {INT_MAX}")
    return value


def _check_decimal(field: MetadataField, value: object) -> MetadataValue:
    # Floats are refused: 0.1 is not the decimal the user typed.
    if isinstance(value, bool) or not isinstance(value, (int, Decimal, str)):
        raise _fail(field, value, "a Decimal, an int or a decimal string")
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise _fail(field, value, "a decimal number") from None
    if not number.is_finite():
        raise _fail(field, value, "a finite decimal number")
    _check_precision(field, number)
    return number


def _check_precision(field: MetadataField, number: Decimal) -> None:
    exponent = number.as_tuple().exponent
    scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    digits = len(number.as_tuple().digits) + max(exponent if isinstance(exponent, int) else 0, 0)
    if scale > DECIMAL_MAX_SCALE or digits > DECIMAL_MAX_DIGITS:
        raise _fail(
            field,
            number,
            f"at most {DECIMAL_MAX_DIGITS} digits, {DECIMAL_MAX_SCALE} after the point",
        )


def _check_date(field: MetadataField, value: object) -> MetadataValue:
    # A datetime is a date subclass; silently dropping its time would lose data.
    if isinstance(value, datetime) or not isinstance(value, date):
        raise _fail(field, value, "a datetime.date")
    return value


def _check_bool(field: MetadataField, value: object) -> MetadataValue:
    if not isinstance(value, bool):
        raise _fail(field, value, "a bool")
    return value


def _check_url(field: MetadataField, value: object) -> MetadataValue:
    if not isinstance(value, str) or len(value) > URL_MAX_CHARS or not _URL.fullmatch(value):
        raise _fail(field, value, "an http:// or https:// URL")
    return value


def _check_select(field: MetadataField, value: object) -> MetadataValue:
    return _option_of(field, value).id


def _check_multi_select(field: MetadataField, value: object) -> MetadataValue:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _fail(field, value, "a set of options")
    chosen = frozenset(_option_of(field, item).id for item in value)
    if not chosen:
        raise _fail(field, value, "at least one option (clear the value instead)")
    return chosen


def _option_of(field: MetadataField, value: object) -> FieldOption:
    for option in field.active_options():
        if _names_option(option, value):
            return option
    choices = ", ".join(repr(option.value) for option in field.active_options())
    raise _fail(field, value, f"one of its options ({choices})")


def _names_option(option: FieldOption, value: object) -> bool:
    if isinstance(value, uuid.UUID):
        return option.id == value
    return isinstance(value, str) and option.value.casefold() == value.casefold()


_CHECKERS: dict[FieldType, Callable[[MetadataField, object], MetadataValue]] = {
    FieldType.STRING: _check_string,
    FieldType.TEXT: _check_string,
    FieldType.INT: _check_int,
    FieldType.DECIMAL: _check_decimal,
    FieldType.DATE: _check_date,
    FieldType.BOOL: _check_bool,
    FieldType.URL: _check_url,
    FieldType.SELECT: _check_select,
    FieldType.MULTI_SELECT: _check_multi_select,
}


def check_range_bound(field: MetadataField, bound: object) -> MetadataValue:
    """Return ``bound`` checked for a range filter on ``field`` (int, decimal, date only)."""
    if not field.field_type.is_ordered:
        raise ValidationError(
            f"metadata field {field.name!r} ({field.field_type.value}) has no order: "
            "filter it by equality"
        )
    return check_value(field, bound)


def to_json(value: MetadataValue) -> Any:
    """Return ``value`` as JSON, for a field's default."""
    if isinstance(value, frozenset):
        return sorted(str(item) for item in value)
    if isinstance(value, bool | int):
        return value
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def from_json(field_type: FieldType, raw: Any) -> MetadataValue | None:
    """Return the value that :func:`to_json` stored for a field of ``field_type``."""
    if raw is None:
        return None
    converters: dict[FieldType, Any] = {
        FieldType.DECIMAL: Decimal,
        FieldType.DATE: date.fromisoformat,
        FieldType.SELECT: uuid.UUID,
        FieldType.MULTI_SELECT: lambda items: frozenset(uuid.UUID(item) for item in items),
    }
    convert = converters.get(field_type)
    return convert(raw) if convert is not None else raw  # type: ignore[no-any-return]
