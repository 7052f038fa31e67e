"""Judging bytes by the bytes: compressed, binary or text; previews that can always be stored."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms.detection import decode_text, looks_like_text, preview

TEXT = b"The quick brown fox jumps over the lazy dog.\n" * 20


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compressed_text_is_previewed_by_its_text(compress: object) -> None:
    data = compress(TEXT)  # type: ignore[operator]

    assert preview(data, "application/octet-stream", chars=20) == "The quick brown fox "


def test_decompression_is_bounded() -> None:
    bomb = gzip.compress(b"a" * 50_000_000)

    assert preview(bomb, "text/plain", chars=10) == "a" * 10


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ("héllo".encode("utf-16"), "héllo"),
        ("héllo".encode("utf-16-be"), "héllo"),
        ("héllo".encode("utf-32"), "héllo"),
        ("\ufeffhéllo".encode(), "héllo"),
        ("é".encode() * 3 + "é".encode()[:1], "ééé"),  # a character cut by the sample's end
        ("naïve".encode("latin-1"), "naïve"),
    ],
)
def test_text_encodings_are_recognised(data: bytes, text: str) -> None:
    assert decode_text(data) == text


@pytest.mark.parametrize(
    "data",
    [b"\x00\x01\x02\x03" * 10, b"%PDF-1.4 hello", b"\x89PNG\r\n", bytes(range(256))],
)
def test_binary_data_is_not_text(data: bytes) -> None:
    assert decode_text(data) is None
    assert not looks_like_text(data)


def test_a_declared_binary_type_gets_no_preview_even_when_it_reads_as_text() -> None:
    assert preview(b"plain words", "application/octet-stream", chars=10) is None
    assert preview(b"plain words", "application/json", chars=10) == "plain word"


@given(st.binary(max_size=4096))
def test_any_bytes_give_no_preview_or_one_postgresql_can_store(data: bytes) -> None:
    for candidate in (data, gzip.compress(data), os.urandom(3) + data):
        shown = preview(candidate, "text/plain", chars=200)
        if shown is not None:
            assert "\x00" not in shown
            shown.encode("utf-8")  # no lone surrogate
            assert shown.strip()
