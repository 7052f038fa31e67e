"""Searches of large documents read the text index once statistics exist, before any vacuum.

Issue 46: on a tenant of real-size documents (manuals: thousands of distinct words each), once
the tables were analyzed, as autovacuum does long before it vacuums a table that only grows,
the planner read every search row instead of the GIN index: the index's newest entries wait in
its pending list, which every index scan reads whole and the planner prices as such, while the
rows' vectors, stored out of line, make the table itself look small. A query that matches
nothing took 125-170 ms by sequential scan against 14 ms through the index. Read here from the
plans (on Citus, the plan of the tenant's node that EXPLAIN returns), on both engines.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.testing.texts import add_extracted_documents
from tests.conftest import new_user

#: Documents, each one part of 15,900 characters (a part holds at most 16,000) drawn from a
#: vocabulary of real-size breadth: every vector holds thousands of words, stored out of line
#: as a manual's are. With 600 of them, GIN indexes with a pending list are read by a
#: sequential scan on PostgreSQL 15 and 18, and those without by the index; with 300,
#: PostgreSQL 18 prices both plans alike (docs/search.md, "No pending list").
DOCUMENTS = 600
PART_CHARS = 15_900
VOCABULARY = [f"w{n:05x}" for n in range(20_000)]
RARE = "kalomine"


def _text(rng: random.Random, extra: str = "") -> str:
    # Zipf-like: a few words everywhere, most words in few documents, as in prose.
    words: list[str] = [extra] if extra else []
    length = len(extra)
    while length < PART_CHARS:
        word = VOCABULARY[min(int(rng.paretovariate(0.7)) - 1, len(VOCABULARY) - 1)]
        word = word if rng.random() < 0.5 else rng.choice(VOCABULARY)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:PART_CHARS]


@pytest.fixture(scope="module")
def large(engine: Engine, module_tenant: str) -> str:
    """The module's tenant (its tests only read) with :data:`DOCUMENTS` extracted documents,
    one of them holding :data:`RARE`; analyzed (as autovacuum's analyze would), never
    vacuumed; its schema's name."""
    rng = random.Random(46)
    texts = [[_text(rng, RARE if n == DOCUMENTS // 2 else "")] for n in range(DOCUMENTS)]
    add_extracted_documents(engine, module_tenant, new_user(engine), texts)
    schema = tenancy.schema_name(module_tenant)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'ANALYZE "{schema}".document_search')
    return schema


def _nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every plan node in an EXPLAIN (FORMAT JSON) document, a Citus task's remote plan too."""
    if isinstance(plan, dict):
        if "Node Type" in plan:
            yield plan
        for value in plan.values():
            yield from _nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _nodes(value)


@pytest.mark.parametrize("word", [RARE, "nosuchword"])
def test_a_word_is_looked_up_in_the_index_not_in_every_row(
    engine: Engine, large: str, word: str
) -> None:
    with engine.connect() as conn:
        found = conn.exec_driver_sql(
            f'SELECT count(*) FROM "{large}".document_search'
            f" WHERE terms @@ plainto_tsquery('simple', '{word}')"
        ).scalar_one()
        plan = conn.exec_driver_sql(
            f'EXPLAIN (FORMAT JSON) SELECT document_id FROM "{large}".document_search'
            f" WHERE terms @@ plainto_tsquery('simple', '{word}')"
        ).scalar_one()

    nodes = list(_nodes(plan))
    # On Citus a node's relation is the tenant's shard; its alias is the table's name.
    read_whole = [
        node
        for node in nodes
        if node["Node Type"] == "Seq Scan"
        and node.get("Alias", node.get("Relation Name")) == "document_search"
    ]
    indexes = {str(node["Index Name"]) for node in nodes if "Index Name" in node}
    assert found == (1 if word == RARE else 0)
    assert read_whole == []
    assert any(name.startswith("ix_document_search_") for name in indexes), indexes
