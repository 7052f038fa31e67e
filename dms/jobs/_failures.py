r"""The text recorded for a failed attempt: whatever the error holds, it can be stored.

A handler's exception may carry anything: NUL (which PostgreSQL's ``text`` refuses), lone
surrogates (how Python decodes a file name that is not UTF-8; psycopg cannot encode them) or
megabytes of output. Such an error must still be recorded, or its job would sit ``running``
with no ``last_error`` until its lease ends. So the text is escaped first (NUL as ``\x00``,
a lone surrogate as ``\udcff``: visible, never silently dropped; not reversible, since a
literal ``\x00`` reads the same), then cut to :data:`MAX_ERROR_CHARS` with a marker that says
how many characters went.
"""

from __future__ import annotations

import traceback

from dms.errors import ValidationError

#: Longest text kept in ``last_error``, in characters, marker included.
MAX_ERROR_CHARS = 8000
#: Longest summary (the last line) kept per attempt in the ``errors`` history, in characters.
MAX_SUMMARY_CHARS = 1000
#: Put where text was cut; ``{cut}`` is how many characters were left out.
CUT_MARKER = "\n[... {cut} characters cut ...]\n"
#: Share of the kept text taken from the start: the rest comes from the end, where a
#: traceback's innermost frames and the exception's message are.
_HEAD_SHARE = 0.25


def error_text(error: str | BaseException) -> str:
    """The text recorded for ``error`` (a traceback for an exception): escaped, then capped.

    Raises :class:`~dms.errors.ValidationError` for anything but a ``str`` or an exception.
    """
    if isinstance(error, BaseException):
        error = "".join(traceback.format_exception(error)).rstrip()
    elif not isinstance(error, str):
        raise ValidationError(f"error must be a str or an exception, not {type(error).__name__}")
    return _capped(escaped(error))


def summary_of(text: str) -> str:
    """The last non-blank line of ``text``, at most :data:`MAX_SUMMARY_CHARS` characters."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:MAX_SUMMARY_CHARS] if lines else ""


def escaped(text: str, *, ascii_only: bool = False) -> str:
    """``text`` as PostgreSQL stores it: lone surrogates and NUL as backslash escapes.

    ``ascii_only`` escapes every non-ASCII character too: for log lines, which must survive
    any terminal, file or log shipper on the way.
    """
    # backslashreplace writes a surrogate as \udcff; everything else encodes unchanged.
    encoding = "ascii" if ascii_only else "utf-8"
    text = text.encode(encoding, "backslashreplace").decode(encoding)
    return text.replace("\x00", "\\x00")


def _capped(text: str) -> str:
    """``text`` cut to :data:`MAX_ERROR_CHARS` with a marker in the middle, if longer."""
    if len(text) <= MAX_ERROR_CHARS:
        return text
    # The marker's own length depends on the count it shows: size it for the largest count.
    room = MAX_ERROR_CHARS - len(CUT_MARKER.format(cut=len(text)))
    head = int(room * _HEAD_SHARE)
    tail = room - head
    marker = CUT_MARKER.format(cut=len(text) - head - tail)
    return text[:head] + marker + text[len(text) - tail :]
