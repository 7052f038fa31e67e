"""The text recorded for a failed attempt: always storable, capped, with a visible cut."""

from __future__ import annotations

import re

import pytest

from dms.errors import ValidationError
from dms.jobs._failures import (
    CUT_MARKER,
    MAX_ERROR_CHARS,
    MAX_SUMMARY_CHARS,
    error_text,
    summary_of,
)


def storable(text: str) -> bool:
    """What PostgreSQL's ``text`` accepts from psycopg: UTF-8 without NUL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def test_a_short_message_is_kept_as_it_is() -> None:
    assert error_text("disk full: /var/tmp") == "disk full: /var/tmp"


def test_nul_is_recorded_as_a_visible_escape() -> None:
    assert error_text("bad byte \x00 here") == "bad byte \\x00 here"


def test_a_lone_surrogate_is_recorded_as_a_visible_escape() -> None:
    name = b"scan-\xff.pdf".decode("utf-8", "surrogateescape")
    assert error_text(f"cannot open {name}") == "cannot open scan-\\udcff.pdf"


def test_a_control_character_is_not_nul_and_stays() -> None:
    assert error_text("tab\there\x01") == "tab\there\x01"


def test_an_exception_is_recorded_with_its_traceback_and_escaped() -> None:
    def handler() -> None:
        raise FileNotFoundError("cannot read scan-\udcff.pdf\x00")

    with pytest.raises(FileNotFoundError) as caught:
        handler()
    text = error_text(caught.value)
    assert text.startswith("Traceback (most recent call last):")
    assert "in handler" in text
    assert text.endswith("FileNotFoundError: cannot read scan-\\udcff.pdf\\x00")
    assert storable(text)


def test_megabytes_are_cut_to_the_cap_with_a_marker_saying_how_much() -> None:
    message = "a" * 1_000 + "b" * 3_000_000 + "z" * 1_000
    text = error_text(message)
    assert len(text) <= MAX_ERROR_CHARS
    assert text.startswith("a" * 1_000)
    assert text.endswith("z" * 1_000)
    found = re.search(r"\[\.\.\. (\d+) characters cut \.\.\.\]", text)
    assert found is not None
    marker = CUT_MARKER.format(cut=found[1])
    assert marker in text
    assert len(text) - len(marker) + int(found[1]) == len(message)


def test_text_at_the_cap_is_not_cut() -> None:
    message = "x" * MAX_ERROR_CHARS
    assert error_text(message) == message


def test_text_one_over_the_cap_is_cut() -> None:
    text = error_text("x" * (MAX_ERROR_CHARS + 1))
    assert len(text) <= MAX_ERROR_CHARS
    assert "characters cut" in text


def test_escapes_count_towards_the_cap() -> None:
    """Escaping first, then cutting: the stored text never exceeds the cap."""
    text = error_text("\x00" * MAX_ERROR_CHARS)
    assert len(text) <= MAX_ERROR_CHARS
    assert storable(text)
    assert text.startswith("\\x00\\x00")


def test_megabytes_of_surrogates_and_nul_record_as_storable_text() -> None:
    text = error_text("\udcff\x00" * 500_000)
    assert storable(text)
    assert len(text) <= MAX_ERROR_CHARS


def test_an_exception_whose_str_fails_still_records() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    text = error_text(Broken())
    assert "Broken" in text
    assert storable(text)


def test_the_summary_is_the_last_non_blank_line_capped() -> None:
    assert summary_of("Traceback ...\n  frame\nValueError: nope\n\n") == "ValueError: nope"
    assert summary_of("") == ""
    assert len(summary_of("y" * 100_000)) == MAX_SUMMARY_CHARS


@pytest.mark.parametrize("error", [None, 42, b"bytes", ["list"]])
def test_an_error_that_is_neither_text_nor_exception_is_refused(error: object) -> None:
    with pytest.raises(ValidationError, match="error must be a str or an exception"):
        error_text(error)  # type: ignore[arg-type]
