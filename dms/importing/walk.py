"""Walking a source tree: every folder and file under a path, as raw bytes, in a fixed order.

Names stay bytes from ``os.scandir`` on (a file name need not be UTF-8 and is kept whole).
The order is pre-order, siblings sorted by their bytes, so that a folder comes before its
contents and two runs over the same tree see the same sequence (which is what makes name
collisions resolve the same way when an import is resumed). Symbolic links are not followed
and devices, FIFOs and sockets are never opened: they are reported as skipped.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, replace

from dms.errors import ValidationError


class EntryKind(str, enum.Enum):
    """What a source entry is."""

    FOLDER = "folder"
    FILE = "file"
    SKIPPED = "skipped"


@dataclass(frozen=True, kw_only=True)
class SourceEntry:
    """One entry of the source tree.

    ``relative`` is the path from the source's parent (the source itself is its own name),
    ``parent`` the ``relative`` of the folder holding it (``None`` for the source itself);
    ``depth`` is 1 for the source. A ``SKIPPED`` entry says why in ``reason``.
    """

    path: bytes
    relative: bytes
    name: bytes
    parent: bytes | None
    depth: int
    kind: EntryKind
    reason: str | None = None


def source_root(source: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> bytes:
    """The absolute path of ``source`` as bytes; :class:`ValidationError` if it is not there.

    Checked before any SQL runs. Only a folder or a regular file can be imported.
    """
    root = os.path.abspath(os.fsencode(source))
    try:
        mode = os.lstat(root).st_mode
    except OSError as exc:
        raise ValidationError(f"cannot import {os.fsdecode(root)!r}: {exc.strerror}") from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise ValidationError(f"cannot import {os.fsdecode(root)!r}: not a folder or a file")
    return root


def walk(root: bytes) -> Iterator[SourceEntry]:
    """Every entry under ``root`` (from :func:`source_root`), ``root`` first."""
    name = os.path.basename(root) or root
    top = SourceEntry(
        path=root,
        relative=name,
        name=name,
        parent=None,
        depth=1,
        kind=EntryKind.FOLDER if os.path.isdir(root) else EntryKind.FILE,
    )
    yield top
    if top.kind is EntryKind.FOLDER:
        yield from _descendants(top)


def count_files(root: bytes) -> int:
    """How many regular files :func:`walk` will find under ``root`` (for a progress bar)."""
    return sum(1 for entry in walk(root) if entry.kind is EntryKind.FILE)


def _descendants(top: SourceEntry) -> Iterator[SourceEntry]:
    stack = [iter(_listing(top))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        yield entry
        if entry.kind is EntryKind.FOLDER:
            stack.append(iter(_listing(entry)))


def _listing(folder: SourceEntry) -> list[SourceEntry]:
    try:
        with os.scandir(folder.path) as found:
            children = sorted(found, key=lambda child: child.name)
            return [_entry(folder, child) for child in children]
    except OSError as exc:
        # The folder itself is imported; what it holds cannot be known.
        reason = f"cannot list this folder: {exc.strerror}"
        return [replace(folder, kind=EntryKind.SKIPPED, reason=reason)]


def _entry(folder: SourceEntry, child: os.DirEntry[bytes]) -> SourceEntry:
    try:
        if child.is_symlink():
            return _skipped(folder, child.name, "symbolic link (not followed)")
        if child.is_dir(follow_symlinks=False):
            kind = EntryKind.FOLDER
        elif child.is_file(follow_symlinks=False):
            kind = EntryKind.FILE
        else:
            return _skipped(folder, child.name, "not a regular file (device, FIFO or socket)")
    except OSError as exc:
        return _skipped(folder, child.name, f"cannot read it: {exc.strerror}")
    return SourceEntry(
        path=child.path,
        relative=folder.relative + b"/" + child.name,
        name=child.name,
        parent=folder.relative,
        depth=folder.depth + 1,
        kind=kind,
    )


def _skipped(folder: SourceEntry, name: bytes, reason: str) -> SourceEntry:
    return SourceEntry(
        path=os.path.join(folder.path, name),
        relative=folder.relative + b"/" + name,
        name=name,
        parent=folder.relative,
        depth=folder.depth + 1,
        kind=EntryKind.SKIPPED,
        reason=reason,
    )
