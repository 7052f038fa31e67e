"""Storage keys: which keys a store accepts, how a key is spelled inside one, content addresses.

Any key made of ``/``-separated segments is accepted, whatever characters a real path has
(spaces, ``+``, ``@``, non-ASCII letters, ``%``, even a leading dot), except what could escape a
store or cannot be stored at all: an empty segment (so no absolute path), ``.`` and ``..``, NUL
and lone surrogates. Inside a store a segment is spelled by :func:`segment_path`, a one-to-one
mapping (percent-encoding of the few characters a file name should not carry), so two keys
never share a file or an object and nothing is lost; :func:`key_of_names` reads it back.

:func:`content_key` derives a key from a SHA-256: identical bytes of one tenant are stored once
and shared by every revision that has them (:mod:`dms.blobs` keeps the reference-safe
bookkeeping in the tenant's schema).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from urllib.parse import unquote

from dms.errors import ValidationError
from dms.tenancy import validate_slug

#: Longest key accepted (characters).
MAX_KEY_CHARS = 1024
#: Most segments in a key.
MAX_KEY_SEGMENTS = 32
#: Longest spelling of one segment (bytes): NAME_MAX of common Linux file systems.
MAX_SEGMENT_BYTES = 255
#: The segment under a tenant's name that holds its content-addressed blobs.
CONTENT_SPACE = "sha256"

_SHA256 = re.compile(r"[0-9a-f]{64}")
# Kept as they are in a file name; everything else (controls, '%', '\\', ':', '*', '?', '"',
# '<', '>', '|', and a leading '.') is percent-encoded. Non-ASCII characters stay readable.
_VERBATIM = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$&'()+,-.;=@[]^_`{}~"
)
#: Non-ASCII characters from here on are kept (below it: C1 control characters).
_FIRST_KEPT_NON_ASCII = 0xA0
#: Ends a spelling that was shortened: '%' is never followed by '~' otherwise.
_SHORTENED = "%~"


def content_key(tenant: str, sha256: str) -> str:
    """The key of the blob with this SHA-256 in ``tenant``'s content-addressed space.

    One space per tenant, not one for all: a tenant's blobs are released by reference counts
    kept in its own schema (in one transaction with its revisions, on whichever node holds the
    schema), a tenant's files can be removed as a whole, and no tenant can learn by
    deduplication whether another one holds some file. The price is one copy per tenant of a
    file that several tenants store.
    """
    validate_slug(tenant)
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ValidationError(f"sha256 must be 64 lowercase hex digits, not {sha256!r}")
    return f"{tenant}/{CONTENT_SPACE}/{sha256[:2]}/{sha256}"


def content_space(tenant: str) -> str:
    """The prefix (ending in ``/``) of every key of ``tenant``'s content-addressed space."""
    validate_slug(tenant)
    return f"{tenant}/{CONTENT_SPACE}/"


def sha256_of_content_key(storage_key: str) -> str | None:
    """The SHA-256 that a content-addressed key names; ``None`` for any other key."""
    parts = storage_key.split("/")
    if (
        len(parts) == len(("tenant", CONTENT_SPACE, "xx", "sha256"))
        and parts[1] == CONTENT_SPACE
        and _SHA256.fullmatch(parts[3])
        and parts[2] == parts[3][:2]
    ):
        return parts[3]
    return None


def segment_path(segment: str) -> str:
    """The spelling of one key segment: one-to-one, never hidden, at most 255 bytes.

    Characters outside a safe set, ``%`` itself and a leading dot become ``%XX`` (UTF-8 bytes).
    A name that would exceed :data:`MAX_SEGMENT_BYTES` keeps a readable start and ends in
    ``%~`` and the SHA-256 of the segment.
    """
    if (
        len(segment) <= MAX_SEGMENT_BYTES
        and _VERBATIM.issuperset(segment)  # ASCII only: as many bytes as characters
        and not segment.startswith(".")
    ):
        return segment  # the common case (every content-addressed key), without a loop
    pieces = [_mapped_char(char, index) for index, char in enumerate(segment)]
    mapped = "".join(pieces)
    if len(mapped.encode()) <= MAX_SEGMENT_BYTES:
        return mapped
    suffix = _SHORTENED + hashlib.sha256(segment.encode()).hexdigest()
    budget = MAX_SEGMENT_BYTES - len(suffix)
    kept: list[str] = []
    for piece in pieces:  # whole pieces only: an escape is never cut in two
        budget -= len(piece.encode())
        if budget < 0:
            break
        kept.append(piece)
    return "".join(kept) + suffix


def _mapped_char(char: str, index: int) -> str:
    if (char in _VERBATIM or ord(char) >= _FIRST_KEPT_NON_ASCII) and not (
        index == 0 and char == "."
    ):
        return char
    return "".join(f"%{byte:02X}" for byte in char.encode())


def key_of_names(names: Sequence[str]) -> str | None:
    """The key whose segments :func:`segment_path` spelled as ``names``.

    ``None`` for what no key is spelled as (a hidden name: staging and temporary files) and
    for a shortened spelling, whose end is only a digest of what it stood for.
    """
    if not names or any(name.startswith(".") or _SHORTENED in name for name in names):
        return None
    try:
        return "/".join(unquote(name, errors="strict") for name in names)
    except UnicodeDecodeError:
        return None  # not written by a store: escapes of no UTF-8 text


def check_key(storage_key: object) -> str:
    """Return ``storage_key`` if a store accepts it, else raise :class:`ValidationError`."""
    if not isinstance(storage_key, str) or not storage_key or len(storage_key) > MAX_KEY_CHARS:
        raise ValidationError(
            f"a storage key is a string of 1 to {MAX_KEY_CHARS} characters, not {storage_key!r:.80}"
        )
    segments = storage_key.split("/")
    if len(segments) > MAX_KEY_SEGMENTS or any(s in ("", ".", "..") for s in segments):
        raise ValidationError(
            f"invalid storage key {storage_key!r}: segments must be non-empty and not '.' or "
            f"'..', at most {MAX_KEY_SEGMENTS} of them"
        )
    if "\x00" in storage_key:
        raise ValidationError(f"invalid storage key {storage_key!r}: it contains NUL")
    try:
        storage_key.encode()
    except UnicodeEncodeError:
        raise ValidationError(
            f"invalid storage key {storage_key!r}: it contains a lone surrogate"
        ) from None
    return storage_key


def spelled(storage_key: str) -> list[str]:
    """The spelling of each segment of ``storage_key`` (checked first)."""
    return [segment_path(segment) for segment in check_key(storage_key).split("/")]


def check_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is whole segments of a key and a ``/``, else ValidationError."""
    if not isinstance(prefix, str) or not prefix.endswith("/"):
        raise ValidationError(f"a key prefix is whole segments ending in '/', not {prefix!r:.80}")
    check_key(prefix[:-1])
    return prefix
