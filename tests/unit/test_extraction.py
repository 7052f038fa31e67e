"""Text extraction: each format the default registry reads, what it refuses, and the parts."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms.domain.validation import unstorable
from dms.errors import UnreadableContent
from dms.extraction import (
    DEFAULT_EXTRACTORS,
    MAX_TEXT_CHARS,
    ExtractedText,
    clean,
    extract_text,
    split_parts,
)
from dms.schema.tenant import TEXT_PART_MAX_CHARS
from tests.documents import pdf


def test_plain_text_in_legacy_and_unicode_encodings() -> None:
    assert extract_text("Grüße".encode("utf-16"), "text/plain").parts == ("Grüße",)
    assert extract_text("naïve café".encode("cp1252"), "text/plain").parts == ("naïve café",)
    assert extract_text(b"plain words", "application/octet-stream") == ExtractedText(
        extractor="text", parts=("plain words",)
    )


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compressed_text_is_read_by_its_bytes(compress: object) -> None:
    assert callable(compress)
    extracted = extract_text(compress(b"compressed words\n" * 3), "application/octet-stream")

    assert extracted.extractor == "compressed"
    assert extracted.parts == ("compressed words\ncompressed words\ncompressed words",)


def test_html_without_markup_scripts_and_styles() -> None:
    page = (
        b"<!DOCTYPE html><html><head><title>Offer</title><style>p {color: red}</style>"
        b"<script>var secret = 1;</script></head><body><h1>Price</h1><p>Fish &amp; chips"
        b"<br>two <b>pounds</b></p><noscript>enable js</noscript></body></html>"
    )

    extracted = extract_text(page, "application/octet-stream")  # found by its bytes

    assert extracted.extractor == "html"
    assert extracted.parts == ("Offer\n\nPrice\n\nFish & chips\ntwo pounds",)


def test_pdf_text_layers_one_page_each() -> None:
    extracted = extract_text(pdf(["first page (1)", "second page"]), "application/pdf")

    assert extracted.extractor == "pdf"
    assert extracted.parts == ("first page (1)\fsecond page",)


def test_a_pdf_encrypted_with_an_empty_password_opens() -> None:
    assert extract_text(pdf(["open text"], password=""), "application/pdf").parts == ("open text",)


#: Input that claims a format it cannot be read in, by name (stable test ids: gzip stamps time).
UNREADABLE = {
    "encrypted pdf": (pdf(["secret"], password="s3cret"), "the PDF is encrypted"),  # noqa: S106
    "pdf without end": (b"%PDF-1.7\n1 0 obj << /Type /Catalog", "the PDF cannot be read"),
    "cut pdf": (pdf(["cut short"])[:-200], "the PDF cannot be read"),
    "corrupt gzip": (gzip.compress(b"words", mtime=0)[:10] + b"\xff" * 20, "corrupt gzip stream"),
    "truncated gzip": (gzip.compress(b"words " * 100, mtime=0)[:-20], "truncated gzip stream"),
    "corrupt bzip2": (b"BZh9garbage", "corrupt bzip2 stream"),
}


@pytest.mark.parametrize("case", UNREADABLE)
def test_unreadable_input_says_why(case: str) -> None:
    data, reason = UNREADABLE[case]
    with pytest.raises(UnreadableContent, match=reason):
        extract_text(data, "application/pdf")


def test_binary_formats_have_no_text() -> None:
    for data in (b"\x89PNG\r\n\x1a\n....", b"PK\x03\x04zip", bytes(range(256)) * 4):
        assert extract_text(data, "application/octet-stream") == ExtractedText(
            extractor="none", parts=()
        )


def test_declared_text_that_is_not_text_has_none() -> None:
    assert extract_text(bytes(range(256)) * 4, "text/plain").parts == ()


def test_what_is_stored_is_always_storable() -> None:
    text = "a\x00b\x07c\r\nd\ud800e\ufeff\n\n\n\nf\fg"

    assert clean(text) == "abc\nd\ufffde\n\nf\fg"


def test_long_text_is_split_at_breaks_and_nothing_is_lost() -> None:
    paragraph = " ".join(f"word{n}" for n in range(200))
    text = "\n\n".join([paragraph] * 40)

    parts = list(split_parts(text))

    assert len(parts) > 1
    assert all(len(part) <= TEXT_PART_MAX_CHARS for part in parts)
    assert all(part.startswith("word0 ") and part.endswith("word199") for part in parts)
    assert "\n\n".join(parts) == text


def test_text_beyond_the_limit_is_cut_and_the_extractor_says_so() -> None:
    extracted = extract_text(b"x " * (MAX_TEXT_CHARS // 2 + 10), "text/plain")

    assert extracted.extractor == f"text (first {MAX_TEXT_CHARS:,} characters)"
    assert sum(len(part) for part in extracted.parts) <= MAX_TEXT_CHARS


def test_an_extractor_registered_first_is_tried_first() -> None:
    def shouting(data: bytes, _mime_type: str) -> str | None:
        return data.decode().upper() if data.startswith(b"shout:") else None

    registry = DEFAULT_EXTRACTORS.with_extractor("shouting", shouting)

    assert extract_text(b"shout: hi", "text/plain", registry).parts == ("SHOUT: HI",)
    assert extract_text(b"quiet", "text/plain", registry).extractor == "text"
    with pytest.raises(ValueError, match="new, non-blank name"):
        registry.with_extractor("text", shouting)


@given(st.text(max_size=3000), st.integers(min_value=10, max_value=400))
def test_parts_fit_and_keep_every_word(text: str, max_chars: int) -> None:
    cleaned = clean(text)
    parts = list(split_parts(cleaned, max_chars))

    assert all(0 < len(part) <= max_chars for part in parts)
    assert "".join("".join(parts).split()) == "".join(cleaned.split())


@given(st.binary(max_size=2000), st.sampled_from(["text/plain", "application/pdf", "text/html"]))
def test_any_bytes_give_storable_text_or_a_reason(data: bytes, mime_type: str) -> None:
    try:
        extracted = extract_text(data, mime_type)
    except UnreadableContent:
        return
    assert all(unstorable(part) is None and "\x00" not in part for part in extracted.parts)
