"""Metadata values, range bounds, names and revisions checked by the domain; no database."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from dms.domain import FieldOption, FieldType, MetadataField
from dms.domain.validation import (
    DECIMAL_MAX_DIGITS,
    DECIMAL_MAX_SCALE,
    INT_MAX,
    INT_MIN,
    STRING_MAX_CHARS,
    TEXT_MAX_CHARS,
    URL_MAX_CHARS,
    check_folder_name,
    check_folder_path,
    check_name,
    check_range_bound,
    check_revision,
    check_value,
    from_json,
    normalize_mime_type,
    to_json,
)
from dms.errors import ValidationError

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
FIELD_ID = uuid.UUID(int=1)
RED, GREEN, OLD = uuid.UUID(int=10), uuid.UUID(int=11), uuid.UUID(int=12)


def option(option_id: uuid.UUID, value: str, *, retired: bool = False) -> FieldOption:
    return FieldOption(
        id=option_id,
        field_id=FIELD_ID,
        value=value,
        position=option_id.int,
        retired_at=NOW if retired else None,
    )


def field(kind: FieldType) -> MetadataField:
    options = (
        (option(RED, "Red"), option(GREEN, "Green"), option(OLD, "Old", retired=True))
        if kind.has_options
        else ()
    )
    return MetadataField(
        id=FIELD_ID,
        name="Colour",
        field_type=kind,
        required=False,
        default=None,
        options=options,
        created_by=uuid.UUID(int=2),
        created_at=NOW,
        updated_at=NOW,
    )


GOOD: list[tuple[FieldType, object, object]] = [
    (FieldType.STRING, "ACME", "ACME"),
    (FieldType.STRING, "x" * STRING_MAX_CHARS, "x" * STRING_MAX_CHARS),
    (FieldType.TEXT, "y" * TEXT_MAX_CHARS, "y" * TEXT_MAX_CHARS),
    (FieldType.INT, INT_MIN, INT_MIN),
    (FieldType.INT, INT_MAX, INT_MAX),
    (FieldType.INT, 0, 0),
    (FieldType.DECIMAL, Decimal("12.3400"), Decimal("12.3400")),
    (FieldType.DECIMAL, 7, Decimal(7)),
    (FieldType.DECIMAL, "-0.5", Decimal("-0.5")),
    (FieldType.DECIMAL, Decimal("0." + "1" * DECIMAL_MAX_SCALE), Decimal("0." + "1" * 10)),
    (FieldType.DECIMAL, Decimal("9" * DECIMAL_MAX_DIGITS), Decimal("9" * DECIMAL_MAX_DIGITS)),
    (FieldType.DECIMAL, Decimal("1E+5"), Decimal("1E+5")),
    (FieldType.DATE, date(2026, 2, 28), date(2026, 2, 28)),
    (FieldType.BOOL, True, True),
    (FieldType.BOOL, False, False),
    (FieldType.URL, "http://example.org", "http://example.org"),
    (FieldType.URL, "https://example.org/a?b=c#d", "https://example.org/a?b=c#d"),
    (FieldType.SELECT, "red", RED),
    (FieldType.SELECT, "GREEN", GREEN),
    (FieldType.SELECT, RED, RED),
    (FieldType.MULTI_SELECT, ["red", GREEN], frozenset({RED, GREEN})),
    (FieldType.MULTI_SELECT, {"red", "Red"}, frozenset({RED})),
    (FieldType.MULTI_SELECT, (GREEN,), frozenset({GREEN})),
]


@pytest.mark.parametrize(("kind", "value", "expected"), GOOD)
def test_good_values_are_converted(kind: FieldType, value: object, expected: object) -> None:
    checked = check_value(field(kind), value)
    assert checked == expected
    assert type(checked) is type(expected)


BAD: list[tuple[FieldType, object, str]] = [
    (FieldType.STRING, "", "non-blank string"),
    (FieldType.STRING, "   ", "non-blank string"),
    (FieldType.STRING, 5, "non-blank string"),
    (FieldType.STRING, "x" * (STRING_MAX_CHARS + 1), f"at most {STRING_MAX_CHARS}"),
    (FieldType.TEXT, "y" * (TEXT_MAX_CHARS + 1), f"at most {TEXT_MAX_CHARS}"),
    (FieldType.INT, INT_MAX + 1, "an int from"),
    (FieldType.INT, INT_MIN - 1, "an int from"),
    (FieldType.INT, True, "an int from"),
    (FieldType.INT, "12", "an int from"),
    (FieldType.INT, 1.0, "an int from"),
    (FieldType.INT, Decimal(1), "an int from"),
    (FieldType.DECIMAL, 0.1, "a Decimal, an int or a decimal string"),
    (FieldType.DECIMAL, False, "a Decimal, an int or a decimal string"),
    (FieldType.DECIMAL, "abc", "a decimal number"),
    (FieldType.DECIMAL, Decimal("NaN"), "a finite decimal"),
    (FieldType.DECIMAL, Decimal("Infinity"), "a finite decimal"),
    (FieldType.DECIMAL, Decimal("0." + "1" * (DECIMAL_MAX_SCALE + 1)), "after the point"),
    (FieldType.DECIMAL, Decimal("9" * (DECIMAL_MAX_DIGITS + 1)), "digits"),
    (FieldType.DECIMAL, Decimal("1E+38"), "digits"),
    (FieldType.DATE, "2026-02-28", "a datetime.date"),
    (FieldType.DATE, datetime(2026, 2, 28, 12, 0), "a datetime.date"),
    (FieldType.DATE, NOW, "a datetime.date"),
    (FieldType.BOOL, 1, "a bool"),
    (FieldType.BOOL, "true", "a bool"),
    (FieldType.URL, "ftp://example.org", "URL"),
    (FieldType.URL, "example.org", "URL"),
    (FieldType.URL, "https://exa mple.org", "URL"),
    (FieldType.URL, "https://", "URL"),
    (FieldType.URL, "https://e.org/" + "a" * URL_MAX_CHARS, "URL"),
    (FieldType.URL, 42, "URL"),
    (FieldType.SELECT, "purple", "one of its options ('Red', 'Green')"),
    (FieldType.SELECT, "old", "one of its options"),
    (FieldType.SELECT, OLD, "one of its options"),
    (FieldType.SELECT, uuid.UUID(int=99), "one of its options"),
    (FieldType.SELECT, 1, "one of its options"),
    (FieldType.MULTI_SELECT, "red", "a set of options"),
    (FieldType.MULTI_SELECT, b"red", "a set of options"),
    (FieldType.MULTI_SELECT, 3, "a set of options"),
    (FieldType.MULTI_SELECT, [], "at least one option"),
    (FieldType.MULTI_SELECT, ["red", "purple"], "'purple'"),
    (FieldType.MULTI_SELECT, ["old"], "one of its options"),
]


@pytest.mark.parametrize(("kind", "value", "expected"), BAD)
def test_bad_values_name_field_type_and_value(
    kind: FieldType, value: object, expected: str
) -> None:
    with pytest.raises(ValidationError) as error:
        check_value(field(kind), value)
    message = str(error.value)
    assert message.startswith(f"metadata field 'Colour' ({kind.value}) needs ")
    assert expected in message


@pytest.mark.parametrize("kind", [FieldType.INT, FieldType.DECIMAL, FieldType.DATE])
def test_range_bounds_on_ordered_types(kind: FieldType) -> None:
    bound = {FieldType.INT: 5, FieldType.DECIMAL: Decimal("1.5"), FieldType.DATE: date.today()}
    assert check_range_bound(field(kind), bound[kind]) == bound[kind]


@pytest.mark.parametrize(
    "kind",
    [k for k in FieldType if k not in (FieldType.INT, FieldType.DECIMAL, FieldType.DATE)],
)
def test_range_bounds_refused_on_unordered_types(kind: FieldType) -> None:
    with pytest.raises(ValidationError, match=r"'Colour' \(\w+\) has no order"):
        check_range_bound(field(kind), "a")


def test_range_bound_is_checked_like_a_value() -> None:
    with pytest.raises(ValidationError, match="an int from"):
        check_range_bound(field(FieldType.INT), "5")


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (FieldType.STRING, "x"),
        (FieldType.INT, -3),
        (FieldType.DECIMAL, Decimal("1.50")),
        (FieldType.DATE, date(2026, 2, 28)),
        (FieldType.BOOL, False),
        (FieldType.URL, "https://example.org"),
        (FieldType.SELECT, RED),
        (FieldType.MULTI_SELECT, frozenset({RED, GREEN})),
    ],
)
def test_defaults_round_trip_through_json(kind: FieldType, value: object) -> None:
    stored = to_json(value)  # type: ignore[arg-type]
    assert from_json(kind, stored) == value
    assert from_json(kind, None) is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (None, "must be a string, not NoneType"),
        ("", "must not be blank"),
        ("  ", "must not be blank"),
        ("x" * 11, "longer than 10 characters"),
    ],
)
def test_bad_names(name: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        check_name("tag", name, max_chars=10)


def test_names_with_slash_only_where_allowed() -> None:
    assert check_name("document", "a/b", max_chars=10) == "a/b"
    with pytest.raises(ValidationError, match="must not contain '/'"):
        check_name("folder", "a/b", max_chars=10, slash_allowed=False)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (".", "must not be '.' or '..'"),
        ("..", "must not be '.' or '..'"),
        ("a/b", "must not contain '/'"),
        ("bell\x07", "contains a control character"),
        ("\x1bescape", "contains a control character"),
        ("del\x7f", "contains a control character"),
        ("c1\x9f", "contains a control character"),
        (" ", "must not be blank"),
    ],
)
def test_folder_names_a_path_cannot_carry_are_refused(name: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        check_folder_name(name)


@pytest.mark.parametrize("name", ["...", ". ", ".hidden", "a..b", "tab-free", "Ünï\u200bcode"])
def test_folder_names_with_dots_or_format_characters_pass(name: str) -> None:
    assert check_folder_name(name) == name


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("Archive", ["Archive"]),
        ("Archive/2026/Q1", ["Archive", "2026", "Q1"]),
        (". /a", [". ", "a"]),
    ],
)
def test_a_folder_path_is_its_names(path: str, names: list[str]) -> None:
    assert check_folder_path(path) == names


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "names no folder"),
        ("///", "names no folder"),
        ("a//b", "has an empty name"),
        ("/a", "has an empty name"),
        ("a/", "has an empty name"),
        ("a/./b", "must not be '.' or '..'"),
        ("a/../b", "must not be '.' or '..'"),
        ("a/b\nc", "contains a control character"),
        ("a/\x00", "cannot be stored"),
        (None, "folder path must be a string"),
    ],
)
def test_a_folder_path_that_is_no_path_of_names_is_refused(path: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        check_folder_path(path)


GOOD_REVISION: dict[str, object] = {
    "storage_key": "blobs/1",
    "sha256": "a" * 64,
    "size_bytes": 0,
    "mime_type": "application/pdf",
}


@pytest.mark.parametrize("key", ["blobs/1", "a..b/c", "..hidden", "a/...", "a/./b", "s3://b/k"])
def test_good_revision_passes(key: str) -> None:
    check_revision(**{**GOOD_REVISION, "storage_key": key})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("storage_key", " ", "storage key"),
        ("storage_key", None, "storage key"),
        ("storage_key", "..", "storage key '..' must not have '..' as a segment"),
        ("storage_key", "a/../b", "storage key 'a/../b' must not have '..' as a segment"),
        ("storage_key", "../b", "must not have '..' as a segment"),
        ("sha256", "A" * 64, "sha256"),
        ("sha256", "a" * 63, "sha256"),
        ("size_bytes", -1, "size_bytes"),
        ("size_bytes", True, "size_bytes"),
        ("size_bytes", INT_MAX + 1, "too large"),
        ("mime_type", "pdf", "mime type"),
        ("mime_type", "Application/PDF", "mime type"),
    ],
)
def test_bad_revisions(key: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        check_revision(**{**GOOD_REVISION, key: value})


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("text/SGML", "text/sgml"),
        (" Text/Plain ;Charset=UTF-8", "text/plain; charset=UTF-8"),
        ("application/vnd.MS-Excel", "application/vnd.ms-excel"),
        ("application/x-apple_diskimage", "application/x-apple_diskimage"),
    ],
)
def test_mime_types_are_normalised(given: str, stored: str) -> None:
    assert normalize_mime_type(given) == stored


@pytest.mark.parametrize(
    "given", ["pdf", "text/", "/plain", "text/plain;charset", "téxt/plain", "text/pl\x00in", None]
)
def test_malformed_mime_types_are_refused(given: object) -> None:
    with pytest.raises(ValidationError, match="mime type"):
        normalize_mime_type(given)
