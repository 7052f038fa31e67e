"""Checks of user input that run before any SQL, raising :class:`~dms.errors.ValidationError`.

The database enforces the same rules (CHECK constraints); checking here first gives messages
that name the field and the value, and keeps a doomed statement off the wire.

Every public entry point of the domain checks its arguments here first, so that a value either
reaches PostgreSQL intact or is refused with a :class:`~dms.errors.ValidationError`: text that
PostgreSQL cannot store (a NUL character, a lone surrogate), a value of the wrong type where an
id, a flag or a version is expected. Nothing else would stop them before the driver, which
raises its own errors (or, for a ``str`` id, sends it as text).
"""

from __future__ import annotations

import re
import unicodedata
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
#: Largest PostgreSQL ``integer``, the column of a document's version.
VERSION_MAX = 2**31 - 1
#: Decimal values keep at most this many significant digits ...
DECIMAL_MAX_DIGITS = 38
#: ... of which at most this many after the point.
DECIMAL_MAX_SCALE = 10
#: Longest ``string`` value; longer prose belongs in a ``text`` field.
STRING_MAX_CHARS = 1000
TEXT_MAX_CHARS = 100_000
URL_MAX_CHARS = 2000

#: Longest names, written once: the checks here and the CHECK constraints of
#: :mod:`dms.schema.tenant` both read them (migrations keep the value of their day).
TITLE_MAX_CHARS = 500
FOLDER_NAME_MAX_CHARS = 255
TAG_NAME_MAX_CHARS = 100
FIELD_NAME_MAX_CHARS = 100
GROUP_NAME_MAX_CHARS = 255
OPTION_MAX_CHARS = 200

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MIME_TYPE = re.compile(r"[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*.*")
_URL = re.compile(r"https?://[^\s/?#]+[^\s]*")
#: The names a path gives to the folder itself and to its parent.
_DOT_SEGMENTS = frozenset({".", ".."})


#: How much of a refused value an error message shows.
_SHOWN_CHARS = 60


def shown(value: object) -> str:
    """Return ``value`` for an error message: its ``repr``, cut to a readable length.

    ``repr`` escapes what could not be printed or stored (NUL characters, lone surrogates), so
    that the message itself is always safe to log and to store.
    """
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def unstorable(text: str) -> str | None:
    """Return why PostgreSQL cannot store ``text`` as ``text``, or ``None`` if it can.

    PostgreSQL text never holds a NUL character, and a UTF-8 database holds no surrogate code
    point (a Python ``str`` may carry one, from ``surrogateescape`` or a broken JSON escape).
    """
    if "\x00" in text:
        return "a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate"
    return None


def check_text(kind: str, value: object) -> str:
    """Return ``value`` if it is a string that PostgreSQL can store, else raise."""
    if not isinstance(value, str):
        raise ValidationError(f"{kind} must be a string, not {type(value).__name__}")
    problem = unstorable(value)
    if problem is not None:
        raise ValidationError(f"{kind} {shown(value)} contains {problem}, which cannot be stored")
    return value


def check_id(kind: str, value: object) -> uuid.UUID:
    """Return ``value`` if it is a :class:`uuid.UUID` (the id of a ``kind``), else raise.

    A ``str`` is refused rather than parsed: ids come from the rows ``dms`` returned.
    """
    if not isinstance(value, uuid.UUID):
        raise ValidationError(f"{kind} id must be a uuid.UUID, not {type(value).__name__}")
    return value


def check_optional_id(kind: str, value: object) -> uuid.UUID | None:
    """Return ``value`` if it is ``None`` or a :class:`uuid.UUID`, else raise."""
    return None if value is None else check_id(kind, value)


def check_ids(kind: str, values: object) -> list[uuid.UUID]:
    """Return the ids in ``values`` (any iterable of :class:`uuid.UUID` but a string), in order.

    Iterates ``values`` once, so a generator is fine.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValidationError(f"{kind} ids must be an iterable of uuid.UUID, not {shown(values)}")
    return [check_id(kind, value) for value in values]


def check_flag(what: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool``; ``"no"`` would otherwise count as true."""
    if not isinstance(value, bool):
        raise ValidationError(f"{what} must be a bool, not {shown(value)}")
    return value


def check_version(value: object) -> int:
    """Return ``value`` if it can be a document's version: an ``int`` column, at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= VERSION_MAX:
        raise ValidationError(f"version must be an int from 1 to {VERSION_MAX}, not {shown(value)}")
    return value


def check_timestamp(what: str, value: object) -> datetime:
    """Return ``value`` if it is a timezone-aware :class:`~datetime.datetime`."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValidationError(f"{what} must be a timezone-aware datetime, not {shown(value)}")
    return value


def check_name(kind: str, name: object, *, max_chars: int, slash_allowed: bool = True) -> str:
    """Return ``name`` if it is a non-blank string of at most ``max_chars`` characters."""
    if not isinstance(name, str):
        raise ValidationError(f"{kind} name must be a string, not {type(name).__name__}")
    check_text(f"{kind} name", name)
    if not name.strip():
        raise ValidationError(f"{kind} name must not be blank: {name!r}")
    if len(name) > max_chars:
        raise ValidationError(f"{kind} name {name[:40]!r}... is longer than {max_chars} characters")
    if not slash_allowed and "/" in name:
        raise ValidationError(f"{kind} name {name!r} must not contain '/'")
    return name


def check_folder_name(name: object) -> str:
    """Return ``name`` if it can name a folder, else raise :class:`ValidationError`.

    What :func:`check_name` checks, and what a name needs to be one segment of a folder path
    (``dms folders``, ``dms import --into``; :func:`check_folder_path`): no ``/``, neither
    ``.`` nor ``..``, and no control character (Unicode category Cc: U+0000-U+001F, DEL,
    U+0080-U+009F), which no one can type or see; the importer shows those of file names as
    Control Pictures instead (docs/import.md), so its names pass.
    """
    checked = check_name("folder", name, max_chars=FOLDER_NAME_MAX_CHARS, slash_allowed=False)
    if checked in _DOT_SEGMENTS:
        raise ValidationError(f"folder name {checked!r} must not be '.' or '..'")
    if any(unicodedata.category(char) == "Cc" for char in checked):
        raise ValidationError(f"folder name {shown(checked)} contains a control character")
    return checked


def check_folder_path(path: object) -> list[str]:
    """Return the names of ``path``, folder names from the top level separated by ``/``.

    ``Archive/2026`` is ``["Archive", "2026"]``. Each name is checked by
    :func:`check_folder_name`; an empty one (``a//b``, a ``/`` at either end) is refused rather
    than skipped, since ``a//b`` is a typo for some path, not a spelling of ``a/b``.
    """
    text = check_text("folder path", path)
    if not text.strip("/"):
        raise ValidationError(f"{text!r} names no folder")
    names = text.split("/")
    if "" in names:
        raise ValidationError(
            f"folder path {shown(text)} has an empty name (two slashes in a row, or one at an end)"
        )
    return [check_folder_name(name) for name in names]


def check_field_type(value: object) -> FieldType:
    """Return ``value`` as a :class:`FieldType` (a member or its value), else raise."""
    if isinstance(value, str):
        try:
            return FieldType(value)
        except ValueError:
            pass
    known = ", ".join(member.value for member in FieldType)
    raise ValidationError(f"unknown field type {shown(value)}; known: {known}")


def check_options(kind: FieldType, name: str, options: object) -> list[str]:
    """Return ``options`` as a list if a field of type ``kind`` called ``name`` may have them."""
    if isinstance(options, (str, bytes)) or not isinstance(options, Iterable):
        raise ValidationError(f"options must be a sequence of strings, not {shown(options)}")
    choices = list(options)
    if choices and not kind.has_options:
        raise ValidationError(f"metadata field {name!r} ({kind.value}) cannot have options")
    for value in choices:
        check_name("option", value, max_chars=OPTION_MAX_CHARS)
    return choices


def check_field_definition(
    *, name: object, field_type: object, required: object, options: object
) -> tuple[FieldType, list[str]]:
    """Check a metadata field's definition; return its type and its options as a list.

    The default is checked later, against the field's options, which need their ids.
    """
    kind = check_field_type(field_type)
    check_name("metadata field", name, max_chars=FIELD_NAME_MAX_CHARS)
    check_flag("required", required)
    return kind, check_options(kind, str(name), options)


def check_revision(
    *, storage_key: object, sha256: object, size_bytes: object, mime_type: object
) -> None:
    """Check the description of an uploaded file before it becomes a revision.

    A storage key never has ``..`` as a segment: whatever joins it to a directory or a prefix
    would reach outside of it (blob stores refuse such keys too: :mod:`dms.storage.keys`).
    """
    if not isinstance(storage_key, str) or not storage_key.strip():
        raise ValidationError(f"storage key must be a non-blank string, not {shown(storage_key)}")
    check_text("storage key", storage_key)
    if ".." in storage_key.split("/"):
        raise ValidationError(f"storage key {shown(storage_key)} must not have '..' as a segment")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ValidationError(f"sha256 must be 64 lowercase hex digits, not {sha256!r}")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValidationError(f"size_bytes must be an int >= 0, not {size_bytes!r}")
    if size_bytes > INT_MAX:
        raise ValidationError(f"size_bytes {size_bytes} is too large")
    if not isinstance(mime_type, str) or not _MIME_TYPE.fullmatch(mime_type):
        raise ValidationError(f"mime type must look like 'type/subtype', not {shown(mime_type)}")
    check_text("mime type", mime_type)


def check_sha256(value: object) -> str:
    """Return ``value`` in lower case if it is 64 hex digits (either case), else raise."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value.lower()):
        raise ValidationError(f"sha256 must be 64 hex digits, not {shown(value)}")
    return value.lower()


#: Longest MIME type accepted, parameters included.
MIME_TYPE_MAX_CHARS = 255
#: A type or subtype name (RFC 6838, section 4.2), once lowered.
_MIME_NAME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
_MIME_PARAMETER_NAME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
_MIME_PARAMETER_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")


def normalize_mime_type(mime_type: object) -> str:
    """Return ``mime_type`` in its one stored spelling, or raise :class:`ValidationError`.

    Types, subtypes and parameter names are case-insensitive (RFC 2045): ``text/SGML``, which
    Python's :mod:`mimetypes` reads from the system's ``mime.types``, is ``text/sgml``.
    Parameters keep their values and are joined with ``"; "``. Only printable ASCII is
    accepted: a MIME type with anything else is not one.
    """
    if not isinstance(mime_type, str) or len(mime_type) > MIME_TYPE_MAX_CHARS:
        raise ValidationError(
            f"mime type must be a string of at most {MIME_TYPE_MAX_CHARS} "
            f"characters, not {mime_type!r:.80}"
        )
    essence, *parameters = mime_type.split(";")
    kind, slash, subtype = essence.strip().lower().partition("/")
    if not slash or not _MIME_NAME.fullmatch(kind) or not _MIME_NAME.fullmatch(subtype):
        raise ValidationError(f"mime type must look like 'type/subtype', not {mime_type!r}")
    return "; ".join([f"{kind}/{subtype}", *(_mime_parameter(p, mime_type) for p in parameters)])


def _mime_parameter(parameter: str, mime_type: str) -> str:
    name, equals, value = parameter.strip().partition("=")
    name, value = name.strip().lower(), value.strip()
    if not equals or not _MIME_PARAMETER_NAME.fullmatch(name):
        raise ValidationError(f"mime type {mime_type!r} has a malformed parameter {parameter!r}")
    if not _MIME_PARAMETER_VALUE.fullmatch(value):
        raise ValidationError(f"mime type {mime_type!r} has a malformed parameter {parameter!r}")
    return f"{name}={value}"


def check_value(field: MetadataField, value: object) -> MetadataValue:
    """Return ``value`` converted for ``field``, or raise :class:`ValidationError`.

    Select values may name an active option by id or by its text (ignoring case); they come
    back as option ids.
    """
    checker = _CHECKERS[field.field_type]
    return checker(field, value)


def _fail(field: MetadataField, value: object, expected: str) -> ValidationError:
    return ValidationError(
        f"metadata field {field.name!r} ({field.field_type.value}) needs {expected}, "
        f"not {shown(value)}"
    )


def _check_string(field: MetadataField, value: object) -> MetadataValue:
    limit = STRING_MAX_CHARS if field.field_type is FieldType.STRING else TEXT_MAX_CHARS
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise _fail(field, value, f"a non-blank string of at most {limit} characters")
    _check_storable(field, value)
    return value


def _check_storable(field: MetadataField, value: str) -> None:
    problem = unstorable(value)
    if problem is not None:
        raise _fail(field, value, f"text without {problem}")


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
    _check_storable(field, value)
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
