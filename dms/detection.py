"""What a file's bytes are, judged by the bytes: compressed, binary or text, and their preview.

A declared MIME type is a guess from a file name; the bytes are the truth. A ``.txt.gz`` file
is gzip, a UTF-16 text is full of NUL bytes, an old man page is ISO-8859-1 with backspace
overstrikes. Everything here is a total function of the bytes: it never raises on any input,
and the text it returns can always be stored by PostgreSQL (no NUL, no lone surrogate, no
control characters but tab and line breaks).

Decisions, in order:

1. compressed (gzip, bzip2, xz by their magic numbers): judge the first
   :data:`SAMPLE_BYTES` of the decompressed stream instead (a corrupt or truncated stream gives
   what could be decompressed, possibly nothing);
2. a known binary format by its magic number (PDF, PNG, ZIP, ELF, ...): binary;
3. a byte-order mark: UTF-8, UTF-16 or UTF-32 text;
4. NUL bytes: UTF-16 without a byte-order mark if they sit in every other byte of mostly
   ASCII text, else binary;
5. valid UTF-8 (a character cut at the end of the sample is fine): text;
6. otherwise a legacy 8-bit text, read as Windows-1252, if control characters are rare;
   else binary.
"""

from __future__ import annotations

import bz2
import codecs
import lzma
import re
import zlib
from collections.abc import Callable

#: How many bytes (decompressed) are judged and decoded.
SAMPLE_BYTES = 8192
#: Share of control characters above which bytes are binary rather than text.
MAX_CONTROL_SHARE = 0.01
#: Share of zero bytes in the odd (or even) positions that makes a sample UTF-16.
UTF16_ZERO_SHARE = 0.9

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_BINARY_MAGIC = (
    b"%PDF-",
    b"\x89PNG",
    b"\xff\xd8\xff",
    b"GIF8",
    b"PK\x03\x04",
    b"\x7fELF",
    b"\x28\xb5\x2f\xfd",  # zstd
    b"7z\xbc\xaf\x27\x1c",
    b"Rar!",
    b"\xd0\xcf\x11\xe0",  # OLE (old Office)
    b"OggS",
    b"RIFF",
    b"\x00\x00\x01\x00",  # ICO
    b"wOFF",
    b"\x1f\x9d",  # compress (.Z): no decompressor in the standard library
)
# Tab, line feed, vertical tab, form feed, carriage return, escape and backspace appear in
# real texts (nroff output, ANSI colours); the others do not.
_TEXT_CONTROLS = b"\t\n\x0b\x0c\r\x1b\x08"
_OTHER_CONTROLS = bytes(b for b in [*range(0x20), 0x7F] if b not in _TEXT_CONTROLS)
_OVERSTRIKE = re.compile(".\x08")
_ANSI_ESCAPE = re.compile("\x1b\\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff]")
_TEXTUAL_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-sh",
        "application/x-csh",
        "application/x-tex",
        "application/x-latex",
        "application/x-troff",
        "application/x-troff-man",
        "application/x-perl",
        "application/x-python",
        "application/sql",
        "application/yaml",
        "application/toml",
        "application/rtf",
        "application/postscript",
        "message/rfc822",
    }
)


def _gunzip(data: bytes) -> bytes:
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS).decompress(data, SAMPLE_BYTES)


def _bunzip2(data: bytes) -> bytes:
    return bz2.BZ2Decompressor().decompress(data, max_length=SAMPLE_BYTES)


def _unxz(data: bytes) -> bytes:
    return lzma.LZMADecompressor().decompress(data, max_length=SAMPLE_BYTES)


_COMPRESSED: tuple[tuple[bytes, str, Callable[[bytes], bytes]], ...] = (
    (b"\x1f\x8b", "gzip", _gunzip),
    (b"BZh", "bzip2", _bunzip2),
    (b"\xfd7zXZ\x00", "xz", _unxz),
)


def compression_of(data: bytes) -> str | None:
    """``"gzip"``, ``"bzip2"`` or ``"xz"`` if ``data`` starts like one, else ``None``."""
    return next((name for magic, name, _ in _COMPRESSED if data.startswith(magic)), None)


def decompressed_sample(data: bytes) -> bytes:
    """The first :data:`SAMPLE_BYTES` of ``data``, decompressed if it is compressed.

    A corrupt or truncated stream yields what could be decompressed before the damage (often
    nothing); a decompression bomb yields only the sample.
    """
    for magic, _, decompress in _COMPRESSED:
        if data.startswith(magic):
            try:
                return decompress(data)
            except (zlib.error, OSError, EOFError, ValueError, lzma.LZMAError):
                return b""
    return data[:SAMPLE_BYTES]


def has_binary_magic(data: bytes) -> bool:
    """Whether ``data`` starts like a known binary format (PDF, PNG, ZIP, ELF, ...)."""
    return data.startswith(_BINARY_MAGIC)


def is_textual_type(mime_type: str) -> bool:
    """Whether files of ``mime_type`` (normalised) are meant to be read as text."""
    essence = mime_type.split(";", 1)[0]
    return (
        essence.startswith("text/")
        or essence in _TEXTUAL_TYPES
        or essence.endswith(("+xml", "+json"))
    )


def decode_text(sample: bytes) -> str | None:
    """The text that ``sample`` holds, cleaned for storage, or ``None`` if it is binary."""
    if sample.startswith(_BINARY_MAGIC):
        return None
    decoded = _decode(sample)
    return None if decoded is None else clean_text(decoded)


def clean_text(text: str) -> str:
    r"""``text`` without what a preview must not hold: overstrikes, controls, byte-order marks.

    ``X\bX`` (bold) and ``_\bX`` (underline), which nroff writes, become ``X``; colour
    escapes go.
    """
    return _CONTROL.sub("", _ANSI_ESCAPE.sub("", _OVERSTRIKE.sub("", text)))


def looks_like_text(data: bytes) -> bool:
    """Whether the start of ``data`` (not decompressed) is text."""
    return decode_text(data[:SAMPLE_BYTES]) is not None


def preview(data: bytes, mime_type: str, *, chars: int) -> str | None:
    """The first ``chars`` characters of the text in ``data``, or ``None`` if there is none.

    There is a preview when the bytes are text (after decompression, if they are compressed)
    and either the declared type is textual or the bytes were compressed: a ``text/plain``
    file that is really gzip gets the preview of its text; a PDF never gets one.
    """
    compressed = compression_of(data) is not None
    if not compressed and not is_textual_type(mime_type):
        return None
    text = decode_text(decompressed_sample(data))
    if text is None:
        return None
    shown = text[:chars]
    return shown if shown.strip() else None


def _decode(sample: bytes) -> str | None:
    for bom, encoding in _BOMS:
        if sample.startswith(bom):
            return _decoded(sample[len(bom) :], encoding, errors="replace")
    if b"\x00" in sample:
        order = _utf16_order(sample)
        return None if order is None else _decoded(sample, order, errors="strict")
    utf8 = _decoded(sample, "utf-8", errors="strict")
    if utf8 is not None:
        return utf8 if _few_controls(sample) else None
    return sample.decode("cp1252", errors="replace") if _few_controls(sample) else None


def _decoded(sample: bytes, encoding: str, *, errors: str) -> str | None:
    # Incremental, not final: a character cut in two by the end of the sample is dropped
    # instead of making the whole sample invalid.
    decoder = codecs.getincrementaldecoder(encoding)(errors=errors)
    try:
        return str(decoder.decode(sample, final=False))
    except UnicodeDecodeError:
        return None


def _utf16_order(sample: bytes) -> str | None:
    even, odd = sample[0::2], sample[1::2]
    if not even or not odd:
        return None
    if odd.count(0) >= UTF16_ZERO_SHARE * len(odd) and even.count(0) < len(even) / 2:
        return "utf-16-le"
    if even.count(0) >= UTF16_ZERO_SHARE * len(even) and odd.count(0) < len(odd) / 2:
        return "utf-16-be"
    return None


def _few_controls(sample: bytes) -> bool:
    controls = len(sample) - len(sample.translate(None, _OTHER_CONTROLS))
    return controls <= MAX_CONTROL_SHARE * max(len(sample), 1)
