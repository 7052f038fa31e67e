"""The naming policy of imports: readable, storable titles from any file name's bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms.domain.validation import check_folder_name, check_name
from dms.importing.names import SiblingNames, readable_name, with_suffix


@pytest.mark.parametrize(
    ("raw", "title", "changed"),
    [
        (b"index.html", "index.html", False),
        ("ünïcödé — ok.txt".encode(), "ünïcödé — ok.txt", False),
        (b"caf\xe9.txt", "café.txt", True),  # Latin-1 / Windows-1252 share
        (b"\x93quoted\x94", "\u201cquoted\u201d", True),  # Windows-1252 quotes
        (b"a\nb\tc", "a\u240ab\u2409c", True),
        (b"del\x7f", "del\u2421", True),
        ("c1\u0085".encode(), "c1\ufffd", True),
        (b"   ", "\u2423\u2423\u2423", True),
        (b".hidden", ".hidden", False),
    ],
)
def test_readable_name(raw: bytes, title: str, changed: bool) -> None:
    readable = readable_name(raw)

    assert readable.text == title
    assert bool(readable.changes) is changed


@given(
    st.binary(min_size=1, max_size=255).filter(lambda raw: b"/" not in raw and b"\x00" not in raw)
)
def test_any_file_name_gives_a_storable_title(raw: bytes) -> None:
    title = readable_name(raw).text

    assert check_name("document", title, max_chars=500) == title
    title.encode("utf-8")  # no lone surrogate
    assert not any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in title)


@given(
    st.binary(min_size=1, max_size=255).filter(
        lambda raw: b"/" not in raw and b"\x00" not in raw and raw not in (b".", b"..")
    )
)
def test_any_directory_name_gives_a_name_folders_take(raw: bytes) -> None:
    """The importer's names and the folders' rule agree: no control character survives."""
    name = readable_name(raw).text

    assert check_folder_name(name) == name


@pytest.mark.parametrize(
    ("name", "is_file", "expected"),
    [
        ("index.html", True, "index (2).html"),
        ("archive.tar.gz", True, "archive (2).tar.gz"),
        (".bashrc", True, ".bashrc (2)"),
        ("notes", True, "notes (2)"),
        ("v1.2 final", True, "v1.2 final (2)"),
        ("Docs.old", False, "Docs.old (2)"),
    ],
)
def test_suffix_goes_before_the_extension_of_files(name: str, is_file: bool, expected: str) -> None:
    assert with_suffix(name, 2, max_chars=255, is_file=is_file) == expected


def test_suffix_keeps_the_name_within_its_limit() -> None:
    long = "x" * 255

    assert with_suffix(long, 12, max_chars=255, is_file=False) == "x" * 250 + " (12)"


def test_siblings_ignore_case_and_count_on() -> None:
    siblings = SiblingNames()
    for name in ("Index.html", "index (2).html"):
        siblings.take(name)

    assert not siblings.is_free("INDEX.HTML")
    assert siblings.free_variant("index.html", max_chars=500, is_file=True) == "index (3).html"
