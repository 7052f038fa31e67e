"""The searches' indexes serve a user under row-level security, read from the plans themselves.

Under row-level security a query's own conditions that are not leakproof (``@@``, ``ILIKE``)
wait for the policy and cannot be index conditions, so the searches read the words and titles
through the tenant's functions of migration 0017, which hold them and the visibility together.
These tests act as the application role (no superuser, no BYPASSRLS) for a user who sees only
what a folder's entry grants, and read the plans PostgreSQL chose inside those functions with
``auto_explain`` (nested statements, sent to the client as notices). ``auto_explain`` is loaded
into the coordinator's session only, while Citus runs the functions on the tenant's node, so
these tests are for plain PostgreSQL; the searches' results are tested on both.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.domain import DocumentQuery, NewDocument
from dms.domain.access import ALL_RIGHTS, Rights
from dms.domain.text_query import parse_text_query
from dms.repositories import search as search_repository
from dms.services import tag_documents
from dms.testing.roles import APPLICATION_ROLE, application_engine
from dms.uow import UnitOfWork
from tests.conftest import new_user, plan_nodes

pytestmark = pytest.mark.plain_only

#: Documents in each folder: enough that reading every row is not the planner's cheapest way.
PILE = 1500


@dataclass(frozen=True)
class Tenant:
    """``alice`` may view ``seen`` (with its ``inner`` folder) only; ``paid`` tags a document."""

    name: str
    alice: uuid.UUID
    seen: uuid.UUID
    inner: uuid.UUID
    paid: uuid.UUID


@pytest.fixture
def world(engine: Engine, tenant: str) -> Tenant:
    admin, alice = (new_user(engine, name) for name in ("admin", "alice"))
    application = application_engine(engine, [tenant])
    with UnitOfWork(application, tenant=tenant, user_id=admin) as uow:
        seen = uow.folders.add(name="seen")
        inner = uow.folders.add(name="inner", parent_id=seen.id)
        unseen = uow.folders.add(name="unseen")
        for folder in (inner, unseen):
            uow.documents.add_many(
                [NewDocument(title=f"pile {n} of paper", folder_id=folder.id) for n in range(PILE)]
            )
        rare = uow.documents.add(title="the kalomine invoice", folder_id=inner.id)
        paid = uow.tags.add(name="paid")
        tag_documents(uow, [rare.id], [paid.id])
        uow.access.grant(ALL_RIGHTS, user_id=admin)
        uow.access.grant(Rights.VIEW, folder_id=seen.id, user_id=alice)
        assert uow.access.revoke()  # everyone's entry at the root
        uow.commit()
    application.dispose()
    schema = tenancy.schema_name(tenant)
    # Statistics, as autovacuum's analyze gives them long before it vacuums a table that only
    # grows: the plans must not wait for a vacuum (the GIN indexes keep no pending list).
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in ("documents", "document_search"):
            conn.exec_driver_sql(f"ANALYZE {schema}.{table}")
    return Tenant(tenant, alice, seen.id, inner.id, paid.id)


@contextmanager
def _as_user_with_plans(
    engine: Engine, world: Tenant, *, analyze: bool = False
) -> Iterator[tuple[UnitOfWork, list[str]]]:
    """A unit of work of ``alice`` as the application role, and the plans of its statements
    (with what each node read, if ``analyze``).

    The suite's engine is a superuser, which alone may load ``auto_explain`` and set it; the
    transaction then takes the application role, so that row-level security applies.
    """
    plans: list[str] = []

    def collect(notice: psycopg.errors.Diagnostic) -> None:
        if notice.message_primary and "plan:" in notice.message_primary:
            plans.append(notice.message_primary)

    with UnitOfWork(engine, tenant=world.name, user_id=world.alice) as uow:
        conn = uow.connection
        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        conn.exec_driver_sql("LOAD 'auto_explain'")
        for setting, value in (
            ("log_min_duration", "0"),
            ("log_nested_statements", "on"),
            ("log_level", "notice"),
            ("log_analyze", "on" if analyze else "off"),
        ):
            conn.exec_driver_sql(f"SET LOCAL auto_explain.{setting} = {value}")
        conn.exec_driver_sql(f"SET LOCAL ROLE {APPLICATION_ROLE}")
        driver.add_notice_handler(collect)
        try:
            yield uow, plans
        finally:
            driver.remove_notice_handler(collect)


def _found_with_plan(engine: Engine, world: Tenant, query: DocumentQuery, function: str) -> str:
    """Search as ``alice``: the one document found must be the rare one; return the plan of
    the statement inside the tenant's function ``function``."""
    with _as_user_with_plans(engine, world) as (uow, plans):
        page = uow.documents.search(query)

    assert [d.title for d in page.items] == ["the kalomine invoice"]
    # Not the estimate that chooses the search's path (revision 0020): an EXPLAIN, not a read.
    reads = [plan for plan in plans if "Query Text: EXPLAIN" not in plan]
    inside = [plan for plan in reads if "FROM document" in plan and function not in plan]
    assert inside, "\n\n".join(plans)
    return "\n\n".join(inside)


def test_a_rare_word_is_found_through_the_text_index(engine: Engine, world: Tenant) -> None:
    plan = _found_with_plan(engine, world, DocumentQuery(text="kalomine"), "search_visible_parts")

    assert "Bitmap Index Scan on ix_document_search_terms_filters" in plan, plan
    assert "Seq Scan on document_search" not in plan, plan


def test_folder_and_tag_filters_are_answered_by_the_text_index(
    engine: Engine, world: Tenant
) -> None:
    query = DocumentQuery(text="invoice", folder_id=world.seen, tags_any=frozenset({world.paid}))
    plan = _found_with_plan(engine, world, query, "search_visible_parts")

    conditions = [line for line in plan.splitlines() if "Index Cond: ((terms @@" in line]
    assert len(conditions) == 1, plan
    assert all(f in conditions[0] for f in ("terms @@", "filters @>", "filters &&")), plan


def test_a_title_fragment_is_found_through_the_trigram_index(engine: Engine, world: Tenant) -> None:
    query = DocumentQuery(title_contains="KALOMIN")
    plan = _found_with_plan(engine, world, query, "search_visible_titles")

    assert "Bitmap Index Scan on ix_documents_title_trgm" in plan, plan


def test_what_the_functions_find_is_only_what_the_user_may_view(
    engine: Engine, world: Tenant
) -> None:
    # "pile" and "paper" are in 1,500 documents the user sees and 1,500 they do not.
    with _as_user_with_plans(engine, world) as (uow, _plans):
        texts = uow.documents.search(DocumentQuery(text="pile"), limit=1000)
        titles = uow.documents.search(DocumentQuery(title_contains="paper"), limit=1000)
        titled = search_repository.titled_like(world.name, "%pile%").subquery()
        direct = uow.connection.scalar(sa.select(sa.func.count()).select_from(titled))

    assert texts.estimated_total == PILE
    assert {d.folder_id for d in texts.items} == {world.inner}
    assert {d.folder_id for d in titles.items} == {world.inner}
    assert direct == PILE


def test_a_match_the_user_may_not_view_is_passed_over_without_its_document(
    engine: Engine, world: Tenant
) -> None:
    # Revision 0021: "pile" is in 1,500 documents alice sees and 1,500 she does not; the
    # search rows carry their documents' scopes, so only the 1,500 are looked up.
    word = parse_text_query("pile")
    with _as_user_with_plans(engine, world, analyze=True) as (uow, plans):
        parts = uow.connection.execute(search_repository.matching_parts(world.name, word)).all()

    assert len(parts) == PILE
    (inside,) = [plan for plan in plans if "JOIN documents d ON d.id = s.document_id" in plan]
    lookups = re.findall(r"on documents d .*loops=(\d+)\)", inside)
    assert lookups == [str(PILE)], inside


def test_a_word_the_user_sees_few_documents_of_is_narrowed_by_the_index(
    engine: Engine, world: Tenant
) -> None:
    # Revision 0020: "paper" is in 3,001 documents of a tenant with statistics; alice may view
    # the 1,501 below "seen", one of "unseen" shared with her and one she owns there. Rather
    # than check each match, the text index reads the word's matches under her folder scopes,
    # and the two documents she sees otherwise are looked up apart.
    application = application_engine(engine, [world.name])
    with UnitOfWork(application, tenant=world.name, system="tests") as uow:
        (unseen,) = [f for f in uow.folders.children(None) if f.name == "unseen"]
        shared, owned = uow.documents.search(DocumentQuery(folder_id=unseen.id), limit=2).items
        uow.access.grant(Rights.VIEW, document_id=shared.id, user_id=world.alice)
        uow.access.set_owner(world.alice, document_id=owned.id)
        uow.commit()
    application.dispose()

    with _as_user_with_plans(engine, world) as (uow, plans):
        found = uow.documents.search(DocumentQuery(text="paper"), limit=1000)
        every = uow.documents.search(
            DocumentQuery(text="paper"), limit=1000, after=found.next_cursor
        )

    ids = {d.id for d in (*found.items, *every.items)}
    assert len(ids) == PILE + 2
    assert {shared.id, owned.id} <= ids
    assert {d.folder_id for d in (*found.items, *every.items)} == {world.inner, unseen.id}
    # Its query ran (with the index at scale; a table this small is scanned).
    narrowed = [plan for plan in plans if "s.terms @@ q AND s.filters && scopes" in plan]
    assert narrowed, "\n\n".join(plans)
    # The shared one's words were read from the index of documents that are their own scope
    # (revision 0021), not by looking up each document shared with her.
    assert any("ix_document_search_own_scope" in plan for plan in plans), "\n\n".join(plans)


def test_a_statement_reads_the_users_folder_scopes_and_probes_documents_shared_one_by_one(
    engine: Engine, world: Tenant
) -> None:
    # Revision 0019: documents with entries of their own are scopes too; read into every
    # statement's set they made it as large as the documents shared with the user's groups.
    shared = 40
    application = application_engine(engine, [world.name])
    with UnitOfWork(application, tenant=world.name, system="tests") as uow:
        readers = uow.access.add_group("readers")
        uow.access.add_member(readers.id, world.alice)
        (unseen,) = [f for f in uow.folders.children(None) if f.name == "unseen"]
        page = uow.documents.search(DocumentQuery(folder_id=unseen.id), limit=shared)
        for document in page.items:
            uow.access.grant(Rights.VIEW, document_id=document.id, group_id=readers.id)
        uow.commit()
    application.dispose()

    # Raw SQL through the policy, as the application role: the folder's documents alice sees.
    count = psycopg.sql.SQL(
        "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM {}.documents WHERE folder_id = %s"
    ).format(psycopg.sql.Identifier(tenancy.schema_name(world.name)))
    with _as_user_with_plans(engine, world) as (uow, _plans):
        driver = uow.connection.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        ((plan,),) = driver.execute(count, (unseen.id,)).fetchall()
    nodes = list(plan_nodes(plan[0]["Plan"]))

    (documents,) = [n for n in nodes if n.get("Relation Name") == "documents"]
    grants = [n for n in nodes if n.get("Relation Name") == "access_grants"]
    assert documents["Actual Rows"] == shared, plan
    # Alice's one folder scope ("seen") is the set; the 40 documents' own are probed, one
    # each (by primary key at scale; a table this small is scanned).
    (folder_scopes,) = [n for n in grants if "on_document" in _condition(n)]
    assert (folder_scopes["Actual Rows"], folder_scopes["Actual Loops"]) == (1, 1), plan
    (probe,) = [n for n in grants if "scope_id = documents.id" in _condition(n)]
    assert probe["Actual Loops"] == shared, plan


def _condition(node: dict[str, Any]) -> str:
    return f"{node.get('Index Cond', '')} {node.get('Filter', '')}"
