"""Every SQL expression on the content search's tables: settings, extracted text, the index.

``document_search`` is written by the tenant's triggers only (dms/schema/sql/search.sql): whatever
changes a document's title, tags, text values, current revision or that revision's text rewrites its
rows in the same transaction. This module reads it (:func:`matching_parts`, the relevance of each
matching part, and :func:`titled_like`, for :mod:`dms.repositories.documents`' search), stores
extracted text (which fires the rebuild), and asks the tenant's own function ``search_rebuild`` to
rebuild documents when the text search configuration changes (:meth:`SearchRepository.rebuild`).

Under row-level security PostgreSQL cannot use an index for a condition that is not leakproof
(``@@``, ``ILIKE``): the policy comes first, row by row. So the words and the title fragment
are read through the tenant's ``SECURITY DEFINER`` functions (dms/schema/sql/search.sql), which
hold the condition and the actor's visibility in one query, where the indexes serve them;
docs/access.md ("Searching") says what that needs of the role that owns them.

How a query becomes SQL: each term of a :class:`~dms.domain.text_query.TextQuery` becomes a
``tsquery`` built by PostgreSQL's own functions from the term as a bound value (``plainto_``
for words, ``phraseto_`` for phrases, ``to_tsquery`` of the quoted word for prefixes), folded
like the indexed text and normalised with the tenant's configuration; they are combined with
``tsquery_and``, ``tsquery_or`` and ``tsquery_not``. Nothing a user types is ever parsed by
PostgreSQL as query syntax, so no query string can make a statement fail.

Relevance is ``ts_rank_cd`` (cover density: the words of a query close together in a document
rank it higher, which is what a user who types a remembered passage wants) over the best part
of each document, with the weights title 1.0, tags and values 0.4, content 0.1, divided by
1 + log(length) so that a long document does not win by length alone, plus 1,000 for a part
that has the query's words next to each other, as typed (``search_visible_parts`` computes it).
It is ``double precision`` so that a page's cursor compares exactly.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, REGCONFIG, TSQUERY, insert
from sqlalchemy.sql.functions import Function

from dms import tenancy
from dms.domain import Snippet
from dms.domain.text_query import Term, TextQuery
from dms.domain.validation import check_id, check_ids, check_text, shown
from dms.errors import ValidationError
from dms.schema import tenant as t
from dms.schema.recordsets import recordset

from . import _recordset
from ._base import Repository
from .errors import translated

#: The configuration of a tenant that never chose one.
DEFAULT_CONFIG = "simple"
#: Marks around the words ``ts_headline`` highlights: control characters, which stored text
#: never holds (:mod:`dms.extraction`).
_START, _STOP = "\x02", "\x03"
_HEADLINE_OPTIONS = (
    f"StartSel={_START}, StopSel={_STOP}, MaxWords=30, MinWords=12, ShortWord=0, "
    "MaxFragments=2, "
    'FragmentDelimiter=" ... "'
)
_ID_ARRAY = ARRAY(sa.Uuid)
_CONFIG_NAME = re.compile("^[a-z][a-z0-9_]{0,62}$")

_settings = t.search_settings
_texts = t.revision_texts
_parts = t.revision_text_parts
_index = t.document_search
_pg_ts_config = sa.table(
    "pg_ts_config",
    sa.column("cfgname", sa.Text),
    sa.column("cfgnamespace", sa.Integer),
    schema="pg_catalog",
)
_pg_namespace = sa.table(
    "pg_namespace", sa.column("oid", sa.Integer), sa.column("nspname", sa.Text), schema="pg_catalog"
)


def _config() -> sa.ColumnElement[Any]:
    """The tenant's text search configuration, as a ``regconfig``."""
    chosen = sa.select(_settings.c.text_search_config).scalar_subquery()
    return sa.cast(sa.func.coalesce(chosen, DEFAULT_CONFIG), REGCONFIG)


def _fold(tenant: str, text: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    # The tenant's own function, so that queries fold exactly as the index does. A function is
    # not a table: schema_translate_map does not route it, so it is named with its schema.
    function: Function[str] = Function(
        "search_fold", text, packagenames=(tenancy.schema_name(tenant),), type_=sa.Text
    )
    return function


def _term_query(tenant: str, term: Term, index: int) -> sa.ColumnElement[Any]:
    text = _fold(tenant, sa.bindparam(f"term_{index}", term.text, type_=sa.Text))
    if term.phrase:
        return sa.func.phraseto_tsquery(_config(), text, type_=TSQUERY)
    if not term.prefix:
        return sa.func.plainto_tsquery(_config(), text, type_=TSQUERY)
    # 'word':* in to_tsquery's syntax, the word quoted there so that nothing in it is syntax.
    quoted = sa.func.replace(sa.func.replace(text, "\\", "\\\\"), "'", "''")
    return sa.func.to_tsquery(
        _config(), sa.literal("'") + quoted + sa.literal("':*"), type_=TSQUERY
    )


def tsquery(tenant: str, query: TextQuery) -> sa.ColumnElement[Any]:
    """The ``tsquery`` of ``query`` in ``tenant``'s configuration (empty if it has no word)."""
    combined: sa.ColumnElement[Any] | None = None
    index = 0
    for clause in query.clauses:
        either: sa.ColumnElement[Any] | None = None
        for term in clause.terms:
            one = _term_query(tenant, term, index)
            index += 1
            either = one if either is None else sa.func.tsquery_or(either, one, type_=TSQUERY)
        assert either is not None  # noqa: S101 (a clause has a term)
        if clause.excluded:
            either = sa.func.tsquery_not(either, type_=TSQUERY)
        combined = either if combined is None else sa.func.tsquery_and(combined, either)
    return sa.cast(sa.literal(""), TSQUERY) if combined is None else combined


def _rank(terms: sa.ColumnElement[Any], query: sa.ColumnElement[Any]) -> sa.ColumnElement[float]:
    return sa.cast(sa.func.ts_rank_cd(terms, query, 1), sa.Double)


def matching_parts(
    tenant: str,
    query: TextQuery,
    *,
    within_all: Collection[uuid.UUID] = (),
    within_any: Collection[uuid.UUID] = (),
    max_rows: int | None = None,
) -> sa.Select[tuple[uuid.UUID, float]]:
    """The index rows that ``query`` matches: ``document_id`` and the part's ``rank``.

    Only rows of live documents the actor may view, read by the tenant's function
    ``search_visible_parts`` (dms/schema/sql/search.sql), which holds the words' condition and the
    visibility together so that the GIN index serves the words under row-level security too.
    ``within_all`` and ``within_any`` narrow the rows to documents under every one (at least one) of
    these folders and tags, in the index itself (``filters``: the ids of the document's folder,
    every folder above it and its tags): a common word inside a small folder costs the folder's
    matches, not the word's. They only narrow: the caller still applies its conditions on
    ``documents``, and passes ``max_rows`` (the first rows the index yields) only when it has none.

    The caller joins ``documents`` on ``document_id`` for its conditions, bounds the
    candidates (:data:`~dms.repositories.documents.RANK_CANDIDATES`) and takes each document's
    best part (:func:`best_per_document`). A part that has the query's words next to each
    other, as typed, ranks 1,000 above every part that has not.
    """
    found = sa.select(tsquery(tenant, query)).scalar_subquery()
    parts: Function[Any] = Function(
        "search_visible_parts",
        found,
        _in_order(tenant, query),
        sa.bindparam("within_all", sorted(within_all), _ID_ARRAY),
        sa.bindparam("within_any", sorted(within_any), _ID_ARRAY),
        sa.bindparam("max_rows", max_rows, sa.Integer),
        packagenames=(tenancy.schema_name(tenant),),
    )
    rows = parts.table_valued(
        sa.column("document_id", sa.Uuid), sa.column("rank", sa.Double)
    ).alias("parts")
    return sa.select(rows.c.document_id, rows.c.rank)


def _in_order(tenant: str, query: TextQuery) -> sa.ColumnElement[Any]:
    """The query's words next to each other, as a ``tsquery`` (NULL: it has no such words)."""
    words = query.words_in_order
    if not words:
        return sa.cast(sa.null(), TSQUERY)
    text = _fold(tenant, sa.bindparam("words_in_order", " ".join(words), type_=sa.Text))
    return sa.select(sa.func.phraseto_tsquery(_config(), text, type_=TSQUERY)).scalar_subquery()


def titled_like(tenant: str, pattern: str) -> sa.Select[tuple[uuid.UUID]]:
    """The live documents the actor may view whose title is ``ILIKE pattern`` (escape: backslash).

    Read by the tenant's function ``search_visible_titles`` (dms/schema/sql/search.sql), which holds
    the pattern and the visibility together so that the trigram index serves the pattern under
    row-level security too.
    """
    titled: Function[uuid.UUID] = Function(
        "search_visible_titles",
        sa.bindparam("title_pattern", pattern, sa.Text),
        packagenames=(tenancy.schema_name(tenant),),
        type_=sa.Uuid,
    )
    return sa.select(titled)


def best_per_document(parts: sa.Subquery) -> sa.Select[Any]:
    """Each document of ``parts`` (a subquery of :func:`matching_parts`) with its best rank.

    Also, on every row, how many documents there are (``matched``) and how many parts
    (``parts``): the page's total comes with the page, from one scan of the index.
    """
    best = (
        sa.select(
            parts.c.document_id,
            sa.func.max(parts.c.rank).label("rank"),
            sa.func.count().label("parts"),
        )
        .group_by(parts.c.document_id)
        .subquery("best")
    )
    return sa.select(
        best.c.document_id,
        best.c.rank,
        sa.func.count().over().label("matched"),
        sa.func.sum(best.c.parts).over().label("parts"),
    )


def _snippet(headline: str) -> Snippet:
    """The :class:`Snippet` of a ``ts_headline`` result written with this module's marks."""
    text: list[str] = []
    highlights: list[tuple[int, int]] = []
    length = 0
    for number, piece in enumerate(re.split(f"[{_START}{_STOP}]", headline)):
        if number % 2 and piece:
            highlights.append((length, length + len(piece)))
        text.append(piece)
        length += len(piece)
    return Snippet(text="".join(text).strip("\n"), highlights=tuple(highlights))


class SearchRepository(Repository):
    """The content search's tables of one tenant."""

    def config(self) -> str:
        """The tenant's text search configuration (``simple`` until one is chosen)."""
        chosen = self._execute(sa.select(_settings.c.text_search_config)).scalar()
        return DEFAULT_CONFIG if chosen is None else str(chosen)

    def set_config(self, name: str) -> None:
        """Make ``name`` the tenant's text search configuration; documents keep their rows.

        ``name`` is one of the server's built-in configurations (``simple``, ``english``,
        ``german``, ...), else :class:`ValidationError`. Documents are searched with the new
        one at once, but their rows stay as they were built until :meth:`rebuild`
        (``dms search config`` does both).
        """
        check_text("text search configuration", name)
        available = self.available_configs()
        if not _CONFIG_NAME.match(name) or name not in available:
            raise ValidationError(
                f"no text search configuration {shown(name)}: choose one of {', '.join(available)}"
            )
        upsert = insert(_settings).values(singleton=True, text_search_config=name)
        self._execute(
            upsert.on_conflict_do_update(
                index_elements=[_settings.c.singleton],
                set_={"text_search_config": upsert.excluded.text_search_config},
            )
        )

    def available_configs(self) -> list[str]:
        """The server's built-in text search configurations, by name."""
        rows = self._execute(
            sa.select(_pg_ts_config.c.cfgname)
            .join(_pg_namespace, _pg_namespace.c.oid == _pg_ts_config.c.cfgnamespace)
            .where(_pg_namespace.c.nspname == "pg_catalog")
            .order_by(_pg_ts_config.c.cfgname)
        )
        return [str(name) for name in rows.scalars()]

    def store_text(self, revision_id: uuid.UUID, *, extractor: str, parts: Sequence[str]) -> None:
        """Record the text extracted from ``revision_id`` (no parts: it has none).

        Replaces what an earlier extraction stored. If the revision is its document's current
        one, the document's index rows are rebuilt in this transaction (by trigger).
        """
        self.store_texts({revision_id: (extractor, parts)})

    def store_texts(self, texts: Mapping[uuid.UUID, tuple[str, Sequence[str]]]) -> None:
        """:meth:`store_text` for many revisions (revision id: extractor and parts) at once.

        Every value is checked before any is written; four statements whatever the number.
        """
        for revision_id, (extractor, parts) in texts.items():
            _check_text(revision_id, extractor, parts)
        if not texts:
            return
        ids = sorted(texts)
        # Parts first, then the rows that say the revisions were extracted: their trigger
        # rebuilds the documents' index rows from the parts.
        self._execute(sa.delete(_texts).where(_recordset.any_of(_texts.c.revision_id, ids)))
        self._execute(sa.delete(_parts).where(_recordset.any_of(_parts.c.revision_id, ids)))
        rows = [
            {"revision_id": revision_id, "part_no": number, "body": body}
            for revision_id in ids
            for number, body in enumerate(texts[revision_id][1], start=1)
        ]
        with translated(self._conn, f"text of {len(ids)} revision(s)"):
            if rows:
                self._execute(sa.insert(_parts), rows)
            self._execute(
                sa.insert(_texts),
                [
                    {
                        "revision_id": revision_id,
                        "extractor": texts[revision_id][0],
                        "parts": len(texts[revision_id][1]),
                        "chars": sum(len(part) for part in texts[revision_id][1]),
                    }
                    for revision_id in ids
                ],
            )

    def text_of(self, revision_id: uuid.UUID) -> list[str] | None:
        """The parts of ``revision_id``'s extracted text, or ``None`` if it was not extracted."""
        check_id("revision", revision_id)
        extracted = self._execute(
            sa.select(_texts.c.parts).where(_texts.c.revision_id == revision_id)
        ).one_or_none()
        if extracted is None:
            return None
        rows = self._execute(
            sa.select(_parts.c.body)
            .where(_parts.c.revision_id == revision_id)
            .order_by(_parts.c.part_no)
        )
        return list(rows.scalars())

    def unextracted(
        self, revision_ids: sa.Select[tuple[uuid.UUID]], *, after: uuid.UUID | None, limit: int
    ) -> list[uuid.UUID]:
        """Up to ``limit`` of ``revision_ids`` (a select of ids) not extracted, id > ``after``."""
        candidates = revision_ids.subquery("candidates")
        id_ = candidates.c[0]
        statement = (
            sa.select(id_)
            .where(~sa.exists().where(_texts.c.revision_id == id_))
            .order_by(id_)
            .limit(limit)
        )
        if after is not None:
            statement = statement.where(id_ > after)
        return list(self._execute(statement).scalars())

    def stale_documents(self, *, after: uuid.UUID | None, limit: int) -> list[uuid.UUID]:
        """Up to ``limit`` documents, by id after ``after``, indexed with another configuration."""
        statement = (
            sa.select(_index.c.document_id)
            .where(_index.c.config != sa.cast(_config(), sa.Text))
            .group_by(_index.c.document_id)
            .order_by(_index.c.document_id)
            .limit(limit)
        )
        if after is not None:
            statement = statement.where(_index.c.document_id > after)
        return list(self._execute(statement).scalars())

    def rebuild(self, document_ids: Sequence[uuid.UUID]) -> None:
        """Build the index rows of ``document_ids`` again, with the tenant's configuration."""
        ids = check_ids("document", document_ids)
        if not ids:
            return
        self._execute(
            _rebuild_statement(self._tenant), {"ids": _recordset.encode([{"id": i} for i in ids])}
        )

    def snippets(
        self, current: Mapping[uuid.UUID, uuid.UUID], query: TextQuery
    ) -> dict[uuid.UUID, Snippet]:
        """The best passage of each document's current revision, highlighted for ``query``.

        ``current`` maps document ids to their current revisions' ids; a document without
        extracted text gets no snippet.
        """
        if not current:
            return {}
        found = sa.select(tsquery(self._tenant, query)).scalar_subquery()
        pairs = recordset("current", [("document_id", sa.Uuid()), ("revision_id", sa.Uuid())])
        # The best part of each document: a window rather than DISTINCT ON, which SQLAlchemy
        # 2.0 and 2.1 spell differently.
        best = sa.func.row_number().over(
            partition_by=_index.c.document_id,
            order_by=(_rank(_index.c.terms, found).desc(), _index.c.part_no),
        )
        ranked = (
            sa.select(_index.c.document_id, _parts.c.body, best.label("place"))
            .select_from(pairs)
            .join(_index, _index.c.document_id == pairs.c.document_id)
            .join(
                _parts,
                sa.and_(
                    _parts.c.revision_id == pairs.c.revision_id,
                    _parts.c.part_no == _index.c.part_no,
                ),
            )
            .subquery("ranked")
        )
        headline = sa.func.ts_headline(_config(), ranked.c.body, found, _HEADLINE_OPTIONS)
        statement = sa.select(ranked.c.document_id, headline.label("headline")).where(
            ranked.c.place == 1
        )
        rows = self._execute(
            statement,
            {
                "current": _recordset.encode(
                    [{"document_id": d, "revision_id": r} for d, r in current.items()]
                )
            },
        )
        return {row.document_id: _snippet(row.headline) for row in rows}


def _check_text(revision_id: object, extractor: object, parts: object) -> None:
    check_id("revision", revision_id)
    check_text("extractor", extractor)
    if not isinstance(parts, (list, tuple)):
        raise ValidationError(f"text parts must be a list of strings, not {shown(parts)}")
    for part in parts:
        check_text("extracted text", part)
        if len(part) > t.TEXT_PART_MAX_CHARS:
            raise ValidationError(
                f"a part of extracted text has {len(part)} characters; "
                f"the limit is {t.TEXT_PART_MAX_CHARS}"
            )


def _rebuild_statement(tenant: str) -> sa.Select[Any]:
    ids = recordset("ids", [("id", sa.Uuid())])
    rebuild: Function[Any] = Function(
        "search_rebuild", ids.c.id, packagenames=(tenancy.schema_name(tenant),)
    )
    return sa.select(sa.func.count(rebuild)).select_from(ids)
