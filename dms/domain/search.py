"""Search filters and keyset pagination, as values.

A :class:`DocumentQuery` combines filters with AND; :class:`Page` carries one page of results
and the :class:`Cursor` of the next. Pages are ordered by ``(lower(title), id)``, or, for a
content search (``text``), by ``(relevance descending, id)``: a total order either way, so
that a page boundary never skips or repeats a document.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Generic, TypeVar

from dms.errors import ValidationError

from .model import MetadataValue
from .text_query import parse_text_query
from .validation import check_flag, check_id, check_optional_id, check_text, shown

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
    ``text`` searches the documents' content, titles, tags and text values in the syntax of
    :mod:`dms.domain.text_query`, and orders the results by relevance.
    """

    folder_id: uuid.UUID | None = None
    include_subfolders: bool = True
    tags_all: frozenset[uuid.UUID] = field(default_factory=frozenset)
    tags_any: frozenset[uuid.UUID] = field(default_factory=frozenset)
    title_contains: str | None = None
    metadata: tuple[MetadataFilter, ...] = ()
    text: str | None = None


@dataclass(frozen=True, kw_only=True)
class Cursor:
    """Where the next page starts: after the document with this sort key and id.

    ``rank`` is set for the pages of a content search (its sort key is the relevance, and
    ``title_key`` is then ``""``), and only then.
    """

    title_key: str
    id: uuid.UUID
    rank: float | None = None

    def encode(self) -> str:
        """Return an opaque URL-safe token for APIs."""
        fields: list[object] = [self.title_key, str(self.id)]
        if self.rank is not None:
            fields.append(self.rank)  # repr of a float round-trips exactly
        return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Return the cursor in ``token``; :class:`ValidationError` if it is not one."""
        if not isinstance(token, str):
            raise ValidationError(f"not a page cursor: {shown(token)}")
        try:
            title_key, id_, *rank = json.loads(base64.urlsafe_b64decode(token.encode()))
            cursor = cls(title_key=str(title_key), id=uuid.UUID(id_), rank=_rank_of(rank))
        except (ValueError, TypeError, binascii.Error) as exc:
            raise ValidationError(f"not a page cursor: {shown(token)}") from exc
        return cursor


def _rank_of(fields: list[object]) -> float | None:
    if not fields:
        return None
    if len(fields) > 1 or type(fields[0]) not in (int, float):
        raise ValueError("not a rank")
    return float(fields[0])  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Snippet:
    """A passage of a document's text around what a content search found.

    ``highlights`` are the ``(start, end)`` offsets in ``text`` of the matched words, so that a
    caller can mark them in whatever its output is (:meth:`marked` for plain text).
    """

    text: str
    highlights: tuple[tuple[int, int], ...] = ()

    def marked(self, start: str = "[", end: str = "]") -> str:
        """``text`` with each highlight between ``start`` and ``end``."""
        pieces: list[str] = []
        position = 0
        for first, last in self.highlights:
            pieces += [self.text[position:first], start, self.text[first:last], end]
            position = last
        pieces.append(self.text[position:])
        return "".join(pieces)


@dataclass(frozen=True, kw_only=True)
class Page(Generic[T]):
    """One page of results; ``next_cursor`` is ``None`` on the last page.

    A content search also gives each document's :class:`Snippet` (by document id, for the
    documents of this page only) and the number of matches: exact up to the number of matches
    a search ranks (``total_exact``), a lower bound beyond it.
    """

    items: Sequence[T]
    next_cursor: Cursor | None
    snippets: Mapping[uuid.UUID, Snippet] = field(default_factory=dict)
    estimated_total: int | None = None
    total_exact: bool = True


def check_page_size(limit: int) -> int:
    """Return ``limit`` if it is a valid page size, else raise :class:`ValidationError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValidationError(f"page size must be an int from 1 to {MAX_PAGE_SIZE}, not {limit!r}")
    return limit


def check_query(query: object) -> DocumentQuery:
    """Return ``query`` if each of its filters has the type it declares, else raise.

    The dataclasses take whatever they are given; a search checks its query here, before any
    SQL, so that a wrong type or text PostgreSQL cannot store never reaches the driver. Metadata
    values are checked against their fields later, when the fields are known.
    """
    if not isinstance(query, DocumentQuery):
        raise ValidationError(f"a search needs a DocumentQuery, not {shown(query)}")
    check_optional_id("folder", query.folder_id)
    check_flag("include_subfolders", query.include_subfolders)
    for tags in (query.tags_all, query.tags_any):
        if not isinstance(tags, (set, frozenset)):
            raise ValidationError(f"tag filters must be sets of tag ids, not {shown(tags)}")
        for tag_id in tags:
            check_id("tag", tag_id)
    if query.title_contains is not None:
        check_text("title filter", query.title_contains)
    if query.text is not None:
        parse_text_query(query.text)
    if not isinstance(query.metadata, (tuple, list)):
        raise ValidationError(f"metadata filters must be a tuple, not {shown(query.metadata)}")
    for wanted in query.metadata:
        if not isinstance(wanted, MetadataFilter):
            raise ValidationError(f"not a MetadataFilter: {shown(wanted)}")
        check_id("metadata field", wanted.field_id)
    return query


def check_cursor(after: object) -> Cursor | None:
    """Return ``after`` if it is ``None`` or a :class:`Cursor` that PostgreSQL can compare."""
    if after is None:
        return None
    if not isinstance(after, Cursor):
        raise ValidationError(f"a page starts after a Cursor, not {shown(after)}")
    check_text("page cursor", after.title_key)
    check_id("document", after.id)
    rank = after.rank
    if rank is not None and (type(rank) is not float or not math.isfinite(rank)):
        raise ValidationError(f"a page cursor's rank is a finite float, not {shown(rank)}")
    return after
