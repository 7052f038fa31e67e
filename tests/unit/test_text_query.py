"""The content search's query syntax: what each form means, and what is refused before any SQL."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms.domain import DocumentQuery
from dms.domain.search import check_query
from dms.domain.text_query import (
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    Clause,
    Term,
    TextQuery,
    parse_text_query,
)
from dms.errors import ValidationError


def words(*texts: str) -> tuple[Clause, ...]:
    return tuple(Clause(terms=(Term(text=text),)) for text in texts)


def test_words_are_all_required() -> None:
    assert parse_text_query("  invoice  acme ") == TextQuery(clauses=words("invoice", "acme"))


def test_a_quoted_phrase_is_one_term() -> None:
    parsed = parse_text_query('late "payment fee" due')

    assert parsed.clauses[1] == Clause(terms=(Term(text="payment fee", phrase=True),))
    assert [clause.terms[0].text for clause in parsed.clauses] == ["late", "payment fee", "due"]


def test_an_unbalanced_quote_closes_at_the_end() -> None:
    assert parse_text_query('fee "late payment').clauses[1] == Clause(
        terms=(Term(text="late payment", phrase=True),)
    )


def test_or_joins_the_items_around_it() -> None:
    parsed = parse_text_query("acme invoice OR receipt or bill due")

    assert parsed.clauses == (
        Clause(terms=(Term(text="acme"),)),
        Clause(terms=(Term(text="invoice"), Term(text="receipt"), Term(text="bill"))),
        Clause(terms=(Term(text="due"),)),
    )


def test_a_leading_or_trailing_or_is_ignored() -> None:
    assert parse_text_query("or invoice or") == TextQuery(clauses=words("invoice"))


def test_a_minus_excludes_a_word_or_a_phrase() -> None:
    parsed = parse_text_query('invoice -draft -"not paid"')

    assert parsed.clauses[1:] == (
        Clause(terms=(Term(text="draft"),), excluded=True),
        Clause(terms=(Term(text="not paid", phrase=True),), excluded=True),
    )


def test_an_excluded_item_is_never_joined_by_or() -> None:
    # "-a or b" would need every document without a: each stands alone instead.
    parsed = parse_text_query("invoice -draft or final")

    assert [clause.excluded for clause in parsed.clauses] == [False, True, False]


def test_a_minus_inside_a_word_or_alone_is_a_word() -> None:
    assert parse_text_query("e-mail - x").terms == (
        Term(text="e-mail"),
        Term(text="-"),
        Term(text="x"),
    )


def test_a_trailing_star_asks_for_a_prefix() -> None:
    assert parse_text_query("paym* inv**").terms == (
        Term(text="paym", prefix=True),
        Term(text="inv", prefix=True),
    )


def test_stars_alone_and_empty_quotes_are_nothing() -> None:
    assert parse_text_query('*** "" invoice') == TextQuery(clauses=words("invoice"))
    assert parse_text_query('"" ***') == TextQuery(clauses=())


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "blank"),
        (" \t\n", "blank"),
        ("a" * (MAX_QUERY_CHARS + 1), "1001 characters long"),
        ("in\x00voice", "NUL"),
        ("in\ud800voice", "surrogate"),
        ("-draft", "only excludes"),
        ('-draft -"old copy"', "only excludes"),
        (" ".join(["w"] * (MAX_QUERY_TERMS + 1)), "more than 32"),
        (b"invoice", "must be a string"),
        (None, "must be a string"),
    ],
)
def test_what_cannot_be_a_query_is_refused(text: object, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        parse_text_query(text)


def test_the_longest_query_is_taken() -> None:
    assert parse_text_query("a" * MAX_QUERY_CHARS).terms == (Term(text="a" * MAX_QUERY_CHARS),)


def test_a_document_query_checks_its_text() -> None:
    with pytest.raises(ValidationError, match="blank"):
        check_query(DocumentQuery(text="  "))


@given(st.text(max_size=200))
def test_any_string_is_parsed_or_refused_with_a_validation_error(text: str) -> None:
    try:
        parsed = parse_text_query(text)
    except ValidationError:
        return
    assert len(parsed.terms) <= MAX_QUERY_TERMS
    assert all(term.text and term.text == term.text.strip() for term in parsed.terms)
    assert not parsed.clauses or not all(clause.excluded for clause in parsed.clauses)


def test_words_in_order_are_the_required_plain_words() -> None:
    assert parse_text_query('late payment -draft "a phrase" x* fee').words_in_order == (
        "late",
        "payment",
        "fee",
    )
    assert parse_text_query("invoice or receipt").words_in_order == ()
    assert parse_text_query("alone").words_in_order == ()
