"""Search filters and keyset pagination, as values.

A :class:`DocumentQuery` combines filters with AND; :class:`Page` carries one page of results
and the :class:`Cursor` of the next. Pages are ordered by ``(lower(title), id)``, a total order,
so that a page boundary never skips or repeats a document however the data changes.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Generic, TypeVar

from dms.errors import ValidationError

from .model import MetadataValue

#: Largest page a query may ask for; bigger pages are a bulk export, not a search.
MAX_PAGE_SIZE = 1000

T = TypeVar("T")

#: A bound of a range filter: int, decimal and date fields only.
RangeBound = int | Decimal | date


@dataclass(frozen=True, kw_only=True)
class MetadataFilter:
    """Documents whose value of ``field_id`` equals ``equals`` or lies in a closed range.

    For a multi-select field, ``equals`` is one option id that the value must contain.
    """

    field_id: uuid.UUID
    equals: MetadataValue | None = None
    at_least: RangeBound | None = None
    at_most: RangeBound | None = None

    def __post_init__(self) -> None:
        """Refuse a filter that filters nothing."""
        if self.equals is None and self.at_least is None and self.at_most is None:
            raise ValidationError(
                f"metadata filter on field {self.field_id} needs equals, at_least or at_most"
            )


@dataclass(frozen=True, kw_only=True)
class DocumentQuery:
    """Filters of a document search; all given filters must hold.

    ``folder_id`` with ``include_subfolders`` searches the whole live subtree of the folder.
    """

    folder_id: uuid.UUID | None = None
    include_subfolders: bool = True
    tags_all: frozenset[uuid.UUID] = field(default_factory=frozenset)
    tags_any: frozenset[uuid.UUID] = field(default_factory=frozenset)
    title_contains: str | None = None
    metadata: tuple[MetadataFilter, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Cursor:
    """Where the next page starts: after the document with this sort key and id."""

    title_key: str
    id: uuid.UUID

    def encode(self) -> str:
        """Return an opaque URL-safe token for APIs."""
        raw = json.dumps([self.title_key, str(self.id)]).encode()
        return base64.urlsafe_b64encode(raw).decode()

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Return the cursor in ``token``; :class:`ValidationError` if it is not one."""
        try:
            title_key, id_ = json.loads(base64.urlsafe_b64decode(token.encode()))
            return cls(title_key=str(title_key), id=uuid.UUID(id_))
        except (ValueError, TypeError, binascii.Error) as exc:
            raise ValidationError(f"not a page cursor: {token!r}") from exc


@dataclass(frozen=True, kw_only=True)
class Page(Generic[T]):
    """One page of results; ``next_cursor`` is ``None`` on the last page."""

    items: Sequence[T]
    next_cursor: Cursor | None


def check_page_size(limit: int) -> int:
    """Return ``limit`` if it is a valid page size, else raise :class:`ValidationError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValidationError(f"page size must be an int from 1 to {MAX_PAGE_SIZE}, not {limit!r}")
    return limit
