"""Real files for the extraction tests, made here: PDFs with text layers, plain or encrypted."""

from __future__ import annotations

import io
from collections.abc import Sequence

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, IndirectObject, NameObject


def pdf(pages: Sequence[str], *, password: str | None = None) -> bytes:
    """A PDF with one page per text (Latin-1, Helvetica), encrypted (RC4) if ``password`` given.

    An empty ``password`` makes a PDF that is encrypted but opens for anyone, as many do.
    """
    writer = PdfWriter()
    font = writer._add_object(  # pypdf has no public call for an indirect object
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for text in pages:
        _add_page(writer, font, text)
    if password is not None:
        writer.encrypt(password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _add_page(writer: PdfWriter, font: IndirectObject, text: str) -> None:
    page = writer.add_blank_page(612, 792)
    fonts = DictionaryObject({NameObject("/F1"): font})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
    escaped = text.encode("latin-1").replace(b"\\", b"\\\\")
    escaped = escaped.replace(b"(", b"\\(").replace(b")", b"\\)")
    stream = DecodedStreamObject()
    stream.set_data(b"BT /F1 12 Tf 72 720 Td (" + escaped + b") Tj ET")
    page[NameObject("/Contents")] = writer._add_object(stream)
