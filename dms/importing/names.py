"""Naming policy: the readable, storable title of a source name, and a way through collisions.

The mapping from a file name (bytes) to a title, documented in ``docs/import.md``:

1. valid UTF-8 is taken as it is;
2. anything else is read as Windows-1252 (what legacy shares use; its five undefined bytes
   become U+FFFD). The raw bytes are kept in the import provenance, so nothing is lost;
3. control characters become visible: U+0000-U+001F as their Control Pictures (a newline is
   ``␊``), DEL as ``␡``, and the C1 controls U+0080-U+009F as U+FFFD;
4. a name that is only whitespace shows each character as ``␣``.

A title that had to change for one of these reasons is reported as renamed. Collisions:
titles are unique per folder ignoring case, and so are the names of sibling folders; Linux
allows ``index.html`` next to ``Index.html``. With :attr:`NamePolicy.RENAME` (the default) the
first in byte order keeps its name and each later one gets a visible suffix before its
extension: ``index (2).html``, ``index (3).html``. With :attr:`NamePolicy.REFUSE` a name that
would need any change is not imported, and reported.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import PurePosixPath

#: Longest extension kept after a collision suffix (``report (2).markdown``).
MAX_EXTENSION_CHARS = 16

_CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(0x20)}
_CONTROL_PICTURES[0x7F] = "\u2421"
_CONTROL_PICTURES.update({code: "\ufffd" for code in range(0x80, 0xA0)})
_BLANK_SYMBOL = "\u2423"


class NamePolicy(str, enum.Enum):
    """What an import does with a name that cannot be a title as it is."""

    RENAME = "rename"
    """Keep the file under a readable, legal, unique name (reported as renamed)."""
    REFUSE = "refuse"
    """Leave the file out (reported as skipped)."""


@dataclass(frozen=True, kw_only=True)
class ReadableName:
    """The title of a source name, and why it differs from the name (empty: it does not)."""

    text: str
    changes: tuple[str, ...] = ()


def readable_name(raw: bytes) -> ReadableName:
    """The readable, storable title of the file name ``raw`` (see the module's rules)."""
    changes: list[str] = []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("cp1252", errors="replace")
        changes.append("not valid UTF-8: read as Windows-1252")
    visible = text.translate(_CONTROL_PICTURES)
    if visible != text:
        changes.append("control characters shown as symbols")
    if not visible.strip():
        visible = _BLANK_SYMBOL * len(visible)
        changes.append("blank name shown as \u2423")
    return ReadableName(text=visible, changes=tuple(changes))


def with_suffix(name: str, number: int, *, max_chars: int, is_file: bool) -> str:
    """``name`` with `` (number)`` before its extension (files) or at its end (folders).

    The start of the name is shortened if the result would exceed ``max_chars``.
    """
    suffix = f" ({number})"
    stem, extension = _split_extension(name) if is_file else (name, "")
    room = max_chars - len(suffix) - len(extension)
    return stem[: max(room, 1)] + suffix + extension


def _split_extension(name: str) -> tuple[str, str]:
    suffixes = PurePosixPath(name).suffixes
    extension = "".join(suffixes[-2:]) if suffixes[-2:-1] == [".tar"] else "".join(suffixes[-1:])
    if not extension or len(extension) > MAX_EXTENSION_CHARS or " " in extension:
        return name, ""
    return name[: -len(extension)], extension


@dataclass
class SiblingNames:
    """The names taken in one folder (titles, or names of subfolders), ignoring case.

    Case is folded as PostgreSQL's ``lower()`` does for ASCII and most scripts; where the two
    disagree the database's unique index still decides, and the import asks again.
    """

    taken: set[str] = field(default_factory=set)

    def is_free(self, name: str) -> bool:
        """Whether no sibling has ``name`` (ignoring case)."""
        return name.lower() not in self.taken

    def take(self, name: str) -> None:
        """Mark ``name`` as taken."""
        self.taken.add(name.lower())

    def free_variant(self, name: str, *, max_chars: int, is_file: bool, start: int = 2) -> str:
        """The first of ``name (2)``, ``name (3)`` ... that no sibling has."""
        number = start
        while True:
            candidate = with_suffix(name, number, max_chars=max_chars, is_file=is_file)
            if self.is_free(candidate):
                return candidate
            number += 1
