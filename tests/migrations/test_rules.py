"""The rule sources against a real database, on plain PostgreSQL and on Citus (docs/rules.md).

A tenant migrated to head holds exactly the functions, triggers, policies and row-security
switches that the area files of dms/schema/sql create, no more and no less; and a change
generated from edited sources goes up to what the edited files create and comes back down to
what was, catalog entry by catalog entry. DDL, so both run as the tenants' owner (the
migrations' role), on tenants of their own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection, Engine

from dms import citus, provisioning, tenancy
from dms.migrations import catalog
from dms.migrations.catalog import PG_CLASS, PG_NAMESPACE
from dms.migrations.frozen import pending, replace_rules
from dms.schema import rules
from dms.schema.ddl import execute_ddl
from dms.schema.rules import Rule
from tests.conftest import new_slug


@contextmanager
def _tenants(engine: Engine, count: int) -> Iterator[list[str]]:
    slugs = [new_slug() for _ in range(count)]
    try:
        for slug in slugs:
            provisioning.create_tenant(engine, slug)
        yield [tenancy.schema_name(slug) for slug in slugs]
    finally:
        for slug in slugs:
            provisioning.drop_tenant(engine, slug)


def _rows(conn: Connection, schema: str) -> set[catalog.CatalogRow]:
    return set(catalog.rows(conn, schema))


def _without_rules(conn: Connection, schema: str) -> None:
    """Drop every function of ``schema`` (their triggers and policies go with them) and switch
    row-level security off on every table."""
    # A probe of the catalog: literal SQL, as in tests/migrations/fingerprint.py.
    regprocedures = conn.execute(
        sa.text(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = :schema"
        ),
        {"schema": schema},
    ).scalars()
    for signature in list(regprocedures):
        execute_ddl(conn, sql.SQL("DROP FUNCTION {} CASCADE").format(sql.SQL(signature)))
    secured = conn.execute(
        sa.select(PG_CLASS.c.relname)
        .join(PG_NAMESPACE, PG_NAMESPACE.c.oid == PG_CLASS.c.relnamespace)
        .where(
            PG_NAMESPACE.c.nspname == schema, PG_CLASS.c.relkind == "r", PG_CLASS.c.relrowsecurity
        )
    ).scalars()
    for table in list(secured):
        execute_ddl(
            conn,
            sql.SQL(
                "ALTER TABLE {}.{} NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY"
            ).format(sql.Identifier(schema), sql.Identifier(table)),
        )
    left = {row.kind for row in catalog.rows(conn, schema)} & {"function", "trigger", "policy"}
    assert left == set(), f"{schema} still holds a {left}"


def _created_from(conn: Connection, schema: str, sources: Sequence[Rule]) -> None:
    _without_rules(conn, schema)
    on_citus = citus.is_citus(conn)
    if on_citus:
        citus.allow_tenant_triggers(conn)
    rules.create(conn, schema, sources, on_citus=on_citus)


def test_a_tenant_at_head_holds_exactly_what_the_rule_sources_create(engine: Engine) -> None:
    with _tenants(engine, 2) as (migrated, built), engine.begin() as conn:
        _created_from(conn, built, rules.load())

        at_head, from_sources = _rows(conn, migrated), _rows(conn, built)

    assert sorted(at_head - from_sources) == []
    assert sorted(from_sources - at_head) == []
    assert {row.kind for row in at_head} >= {"function", "trigger", "policy"}


def _edited(sources: Sequence[Rule]) -> list[Rule]:
    """The sources with one rule of each kind changed, a trigger and its function removed and a
    function added."""
    edits = {
        "function access_right_names(wanted integer)": ("' and '", "' & '"),
        "trigger documents.search_document_moved": (
            "UPDATE OF folder_id ON",
            "UPDATE OF folder_id, title ON",
        ),
        "policy audit_events.access_visible": (
            "('folder', 'access_entry')",
            "('folder', 'access_entry', 'group')",
        ),
    }
    removed = {"function search_tag_renamed()", "trigger tags.search_tag_renamed"}
    edited = []
    for rule in sources:
        if rule.identity in removed:
            continue
        was, now = edits.get(rule.identity, ("", ""))
        assert was in rule.text
        edited.extend(rules.parse(rule.text.replace(was, now) + ";", area=rule.area))
    added = """
        -- Nothing yet.
        CREATE OR REPLACE FUNCTION audit_nothing(x integer)
            RETURNS integer LANGUAGE sql IMMUTABLE
            SET search_path = :"schema", pg_temp
        AS $$SELECT x$$;
    """
    return edited + rules.parse(added, area="audit")


def test_a_generated_change_goes_up_and_comes_back_down_exactly(engine: Engine) -> None:
    sources = rules.load()
    edited = _edited(sources)
    changes = pending({rule.identity: rule.text for rule in sources}, edited)
    assert len(changes) == 6

    with _tenants(engine, 2) as (changed, reference), engine.begin() as conn:
        if citus.is_citus(conn):
            citus.allow_tenant_triggers(conn)
        before = _rows(conn, changed)
        _created_from(conn, reference, edited)

        replace_rules(conn, changed, changes)
        up, wanted = _rows(conn, changed), _rows(conn, reference)
        replace_rules(conn, changed, changes, reverse=True)
        down = _rows(conn, changed)

    assert sorted(up - wanted) == []
    assert sorted(wanted - up) == []
    assert up != before
    assert sorted(down - before) == []
    assert sorted(before - down) == []
