"""The content search's query syntax, parsed into values: web-search style, never an error.

What a user types into a search box::

    invoice acme            both words (AND)
    "late payment fee"      the words as a phrase, in this order
    invoice or receipt      either word (``or`` joins the items on each side of it)
    invoice -draft          invoice, but not draft (an excluded word or phrase)
    paym*                   a word starting with ``paym`` (prefix)

Everything else is read as words: unbalanced quotes close at the end, a lone ``-`` or ``*``
and punctuation are ignored by the text search configuration, and words that the configuration
drops (stop words such as ``the`` in ``english``) only make the query match less, possibly
nothing. Only :func:`parse_text_query` refuses, with :class:`ValidationError`, what cannot be a
query at all (see there): nothing typed by a user ever reaches the database as a driver error.

Normalisation (case, accents, stemming) is the database's, with the tenant's configuration:
this module only finds the structure.
"""

from __future__ import annotations

from dataclasses import dataclass

from dms.errors import ValidationError

from .validation import check_text, shown

#: Longest query, in characters.
MAX_QUERY_CHARS = 1000
#: Most words and phrases in one query: each becomes part of one tsquery expression.
MAX_QUERY_TERMS = 32

_OR = "or"


@dataclass(frozen=True, kw_only=True)
class Term:
    """A word, a prefix or a phrase of a query."""

    text: str
    phrase: bool = False
    prefix: bool = False


@dataclass(frozen=True, kw_only=True)
class Clause:
    """Documents matching any of ``terms``; or, if ``excluded``, documents matching none."""

    terms: tuple[Term, ...]
    excluded: bool = False


@dataclass(frozen=True, kw_only=True)
class TextQuery:
    """Documents matching every clause."""

    clauses: tuple[Clause, ...]

    @property
    def terms(self) -> tuple[Term, ...]:
        """Every term of every clause, in order."""
        return tuple(term for clause in self.clauses for term in clause.terms)

    @property
    def words_in_order(self) -> tuple[str, ...]:
        """The query's required plain words, in order, when it has two or more of them.

        A document that has them next to each other, as typed, is what a user who remembers a
        passage looks for: the search ranks it higher.
        """
        words = tuple(
            clause.terms[0].text
            for clause in self.clauses
            if not clause.excluded
            and len(clause.terms) == 1
            and not (clause.terms[0].phrase or clause.terms[0].prefix)
        )
        return words if len(words) > 1 else ()


def parse_text_query(text: object) -> TextQuery:
    """Return the query that ``text`` spells.

    Raises :class:`ValidationError` before any SQL when ``text`` is not a string, is blank, is
    longer than :data:`MAX_QUERY_CHARS`, holds what PostgreSQL cannot store (NUL, a lone
    surrogate), has more than :data:`MAX_QUERY_TERMS` words and phrases, or only excludes
    (``-draft`` alone would have to read every document of the tenant).
    """
    check_text("search text", text)
    assert isinstance(text, str)  # noqa: S101 (checked above; for the type checker)
    if not text.strip():
        raise ValidationError("search text is blank")
    if len(text) > MAX_QUERY_CHARS:
        raise ValidationError(
            f"search text is {len(text)} characters long; the limit is {MAX_QUERY_CHARS}"
        )
    clauses = _clauses(_items(text))
    if sum(len(clause.terms) for clause in clauses) > MAX_QUERY_TERMS:
        raise ValidationError(
            f"search text {shown(text)} has more than {MAX_QUERY_TERMS} words and phrases"
        )
    if clauses and all(clause.excluded for clause in clauses):
        raise ValidationError(f"search text {shown(text)} only excludes: say what to find as well")
    return TextQuery(clauses=tuple(clauses))


@dataclass(frozen=True)
class _Item:
    term: Term | None  # None: the word "or"
    excluded: bool = False


def _items(text: str) -> list[_Item]:
    items: list[_Item] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char.isspace():
            position += 1
            continue
        excluded = char == "-" and position + 1 < len(text) and not text[position + 1].isspace()
        if excluded:
            position += 1
        item, position = _item_at(text, position, excluded=excluded)
        if item is not None:
            items.append(item)
    return items


def _item_at(text: str, start: int, *, excluded: bool) -> tuple[_Item | None, int]:
    if text[start] == '"':
        end = text.find('"', start + 1)
        end = len(text) if end < 0 else end
        phrase = text[start + 1 : end].strip()
        item = _Item(Term(text=phrase, phrase=True), excluded) if phrase else None
        return item, end + 1
    end = start
    while end < len(text) and not text[end].isspace() and text[end] != '"':
        end += 1
    word = text[start:end]
    if not excluded and word.lower() == _OR:
        return _Item(None), end
    stem = word.rstrip("*")
    if not stem:
        return None, end
    return _Item(Term(text=stem, prefix=stem != word), excluded), end


def _clauses(items: list[_Item]) -> list[Clause]:
    """Join the items around each ``or`` into one clause; an excluded item stands alone."""
    clauses: list[Clause] = []
    joining = False
    for item in items:
        if item.term is None:
            joining = bool(clauses) and not clauses[-1].excluded
            continue
        if joining and not item.excluded:
            last = clauses.pop()
            clauses.append(Clause(terms=(*last.terms, item.term)))
        else:
            clauses.append(Clause(terms=(item.term,), excluded=item.excluded))
        joining = False
    return clauses
