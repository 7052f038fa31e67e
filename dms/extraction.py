"""The text of a revision's bytes, for the content search: extractors, their registry, parts.

:func:`extract_text` judges the bytes themselves, never the declared type alone, and hands them
to the first extractor of a :class:`ExtractorRegistry` that claims them. The default registry
(:data:`DEFAULT_EXTRACTORS`), in order:

* ``compressed``: gzip, bzip2 or xz (by their magic numbers), decompressed up to
  :data:`MAX_INPUT_BYTES` and judged again (a ``.txt.gz`` is searched as its text);
* ``pdf``: the text layer of each page, through `pypdf`_ (pure Python, BSD-licensed, actively
  maintained, no system libraries, so that the wheel installs anywhere; faster native
  libraries such as PyMuPDF are AGPL or need a toolchain). Pages are separated by a form feed.
  Scanned pages without a text layer give no text: that is OCR's job (below);
* ``html``: HTML and XHTML without markup, scripts and styles, entities resolved, block
  elements on lines of their own (the standard library's :mod:`html.parser`);
* ``text``: anything :mod:`dms.detection` decodes as text (UTF-8, UTF-16/32 with or without a
  byte-order mark, legacy 8-bit texts), the declared type notwithstanding;
* everything else (images, archives, office files, ...) has no text: it is recorded as
  extracted, with nothing to index.

**Adding an extractor** (OCR with Tesseract, office formats, ...) as an optional extra: write a
function ``(data: bytes, mime_type: str) -> str | None`` that returns the text, or ``None`` if
the bytes are not its format, and raises :class:`~dms.errors.UnreadableContent` with the reason
if they are but cannot be read; then register it ahead of the defaults::

    registry = DEFAULT_EXTRACTORS.with_extractor("ocr", ocr_text)
    worker = dms.DocumentWorker(engine, processing.handlers(store, extractors=registry))

Import its library inside the function (or guard the import), so that ``dms`` works without
the extra installed.

**What is stored** is always text PostgreSQL accepts: no NUL or other control characters but
tab, line feed and form feed, no lone surrogates (:func:`clean`). **Nothing is dropped from the
index silently**: PostgreSQL keeps word positions up to 16,383 and a ``tsvector`` under 1 MB,
so the text is split (:func:`split_parts`) into parts of at most
:data:`~dms.schema.tenant.TEXT_PART_MAX_CHARS` characters, at page, paragraph, line or word
boundaries, and each part is indexed on its own: every word of every part is found. A query's
words must then all occur in one part (a page or about 16,000 characters) to match together.
Only text beyond :data:`MAX_TEXT_CHARS` is left out, and the extractor's name records it.
Single "words" longer than 2,047 characters (base64 blobs, say) are ignored by PostgreSQL's
parser, as by any search engine.

.. _pypdf: https://pypi.org/project/pypdf/
"""

from __future__ import annotations

import bz2
import io
import lzma
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Protocol

from dms.detection import (
    clean_text,
    compression_of,
    decode_text,
    has_binary_magic,
    is_textual_type,
)
from dms.errors import UnreadableContent
from dms.schema.tenant import TEXT_PART_MAX_CHARS

#: Most bytes an extractor reads (after decompression): 256 MiB.
MAX_INPUT_BYTES = 256 * 1024 * 1024
#: Most characters of text kept per revision: about 600 parts.
MAX_TEXT_CHARS = 10_000_000

#: An extractor: the text of ``data``, ``None`` if it is not its format.
Extractor = Callable[[bytes, str], "str | None"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_BLANK_RUNS = re.compile(r"[ \t]*\n[ \t\n]*\n")
_HTML_START = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body)\b", re.I | re.S)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_BREAKS = ("\f", "\n\n", "\n", " ")


@dataclass(frozen=True, kw_only=True)
class ExtractedText:
    """What :func:`extract_text` found: the extractor that read the bytes and its text parts."""

    extractor: str
    parts: tuple[str, ...]


@dataclass(frozen=True)
class ExtractorRegistry:
    """Extractors by name, tried in order; the first that returns text (or ``""``) wins."""

    extractors: tuple[tuple[str, Extractor], ...]

    def with_extractor(self, name: str, extractor: Extractor) -> ExtractorRegistry:
        """A registry that tries ``extractor`` first, then these."""
        if not name.strip() or any(name == known for known, _ in self.extractors):
            raise ValueError(f"an extractor needs a new, non-blank name, not {name!r}")
        return ExtractorRegistry(((name, extractor), *self.extractors))

    def text(self, data: bytes, mime_type: str) -> tuple[str, str | None]:
        """The name of the extractor that claimed ``data`` and its raw text (``None``: none)."""
        for name, extractor in self.extractors:
            found = extractor(data, mime_type)
            if found is not None:
                return name, found
        return "none", None


def extract_text(
    data: bytes, mime_type: str, registry: ExtractorRegistry | None = None
) -> ExtractedText:
    """The text of ``data``, cleaned and split into parts (none if it has no text).

    Raises :class:`~dms.errors.UnreadableContent` for bytes in a format that cannot be read
    (a corrupt stream, an encrypted PDF): retrying cannot change that.
    """
    name, text = (registry or DEFAULT_EXTRACTORS).text(data, mime_type)
    cleaned = clean(text or "")
    if len(cleaned) > MAX_TEXT_CHARS:
        cleaned = cleaned[:MAX_TEXT_CHARS]
        name = f"{name} (first {MAX_TEXT_CHARS:,} characters)"
    return ExtractedText(extractor=name, parts=tuple(split_parts(cleaned)))


def clean(text: str) -> str:
    """``text`` as PostgreSQL stores it, and as a reader wants it.

    No NUL, no controls but tab, newline and form feed, no lone surrogates, no carriage
    returns, at most one blank line in a row.
    """
    pages = [
        clean_text(page.replace("\r\n", "\n").replace("\r", "\n")) for page in text.split("\f")
    ]
    cleaned = "\f".join(_BLANK_RUNS.sub("\n\n", page) for page in pages)
    return _SURROGATE.sub("\ufffd", cleaned).strip()


def split_parts(text: str, max_chars: int = TEXT_PART_MAX_CHARS) -> Iterator[str]:
    """``text`` in parts of at most ``max_chars`` characters.

    Each part ends at the latest page, paragraph, line or word break that fits (a hard cut
    only inside a "word" longer than half a part).
    """
    rest = text
    while rest:
        if len(rest) <= max_chars:
            part, rest = rest, ""
        else:
            cut = _break_before(rest, max_chars)
            part, rest = rest[:cut], rest[cut:]
        part = part.strip()
        if part:
            yield part


def _break_before(text: str, limit: int) -> int:
    # A break in the last half of the window, the strongest kind first; else the hard limit.
    for mark in _BREAKS:
        found = text.rfind(mark, limit // 2, limit)
        if found > 0:
            return found + len(mark)
    return limit


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _decompressor(kind: str) -> _Decompressor:
    if kind == "gzip":
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    return bz2.BZ2Decompressor() if kind == "bzip2" else lzma.LZMADecompressor()


def _decompressed(data: bytes) -> bytes:
    kind = str(compression_of(data))
    decompressor = _decompressor(kind)
    try:
        out = decompressor.decompress(data, MAX_INPUT_BYTES)
    except (zlib.error, OSError, EOFError, ValueError, lzma.LZMAError) as exc:
        raise UnreadableContent(f"corrupt {kind} stream: {exc}") from exc
    if not decompressor.eof and len(out) < MAX_INPUT_BYTES:
        raise UnreadableContent(f"truncated {kind} stream")
    return out


def _compressed(data: bytes, mime_type: str) -> str | None:
    if compression_of(data) is None:
        return None
    inner = _decompressed(data)
    _, text = DEFAULT_EXTRACTORS.text(inner, "application/octet-stream")
    return text or ""


def _pdf(data: bytes, _mime_type: str) -> str | None:
    if not data.startswith(b"%PDF-"):
        return None
    import pypdf  # noqa: PLC0415 (a dependency of dms; imported when a PDF is met)

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted and not _opened_without_password(reader)
        pages = None if encrypted else [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # hostile bytes can break a parser in any way
        raise UnreadableContent(f"the PDF cannot be read: {type(exc).__name__}: {exc}") from exc
    if pages is None:
        raise UnreadableContent("the PDF is encrypted")
    return "\f".join(pages)


def _opened_without_password(reader: object) -> bool:
    # Many PDFs are "encrypted" with an empty user password: they open for anyone.
    try:
        return bool(reader.decrypt(""))  # type: ignore[attr-defined]
    except Exception:
        return False


class _HtmlText(HTMLParser):
    """Collects the text of a page, without what a browser does not show as text."""

    _HIDDEN = frozenset({"script", "style", "template", "noscript"})
    _BLOCKS = frozenset(
        {
            "p",
            "div",
            "br",
            "li",
            "tr",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "table",
            "section",
            "article",
            "header",
            "footer",
            "pre",
            "blockquote",
            "title",
            "dt",
            "dd",
            "hr",
        }
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pieces: list[str] = []
        self._hidden_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self._hidden_depth += 1
        if tag in self._BLOCKS:
            self.pieces.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN and self._hidden_depth:
            self._hidden_depth -= 1
        if tag in self._BLOCKS:
            self.pieces.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden_depth:
            self.pieces.append(data)


def _html(data: bytes, mime_type: str) -> str | None:
    essence = mime_type.split(";", 1)[0].strip().lower()
    if essence not in _HTML_TYPES and not _HTML_START.match(data[:4096]):
        return None
    text = decode_text(data)
    if text is None:
        return None
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.pieces).split("\n"))
    return "\n".join(lines)


def _text(data: bytes, mime_type: str) -> str | None:
    if has_binary_magic(data):
        return None
    text = decode_text(data)
    if text is None and is_textual_type(mime_type):
        return None  # declared text, but the bytes are not: nothing to index
    return text


#: The extractors ``dms`` ships, in the order they are tried.
DEFAULT_EXTRACTORS = ExtractorRegistry(
    (("compressed", _compressed), ("pdf", _pdf), ("html", _html), ("text", _text))
)
