"""The recording that new tenants are created from: where the schema name goes, what it leaves
out, and what it refuses.
"""

from __future__ import annotations

import pytest
from psycopg import sql

from dms.migrations.template import TemplateError, TenantTemplate, _cut, _without_undone

THROWAWAY = "dms_Template_0123456789abcdef"


def _render(statement: sql.Composable) -> str:
    # Identifier/Literal quoting needs no connection for plain ASCII names.
    return statement.as_string(None)


def _template(*recorded: str) -> TenantTemplate:
    return TenantTemplate(head="0006", recorded=tuple(_cut(text, THROWAWAY) for text in recorded))


def test_the_schema_goes_where_the_recording_named_it_as_an_identifier_or_a_value() -> None:
    template = _template(
        f'CREATE TABLE "{THROWAWAY}".folders (id uuid)',
        f"COMMENT ON SCHEMA \"{THROWAWAY}\" IS '{THROWAWAY}'",
    )

    assert [_render(one) for one in template.statements("tenant_acme")] == [
        'CREATE TABLE "tenant_acme".folders (id uuid)',
        "COMMENT ON SCHEMA \"tenant_acme\" IS 'tenant_acme'",
    ]


def test_the_batch_is_every_statement_in_order() -> None:
    template = _template(f'CREATE TABLE "{THROWAWAY}".a ()', f'CREATE TABLE "{THROWAWAY}".b ()')

    assert _render(template.batch("tenant_x")) == (
        'CREATE TABLE "tenant_x".a ();\nCREATE TABLE "tenant_x".b ();'
    )


def test_a_name_left_inside_other_text_is_refused() -> None:
    with pytest.raises(TemplateError, match="inside other text"):
        _cut(f"SET search_path = {THROWAWAY}_old, public", THROWAWAY)


def test_text_without_the_name_is_kept_as_it_is() -> None:
    assert _cut("SELECT 1", THROWAWAY) == ("SELECT 1",)


_ADD = 'ALTER TABLE "S".{table} ADD CONSTRAINT {name} FOREIGN KEY(created_by) REFERENCES u (id)'
_DROP = 'ALTER TABLE "S".{table} DROP CONSTRAINT {name}'


def test_a_foreign_key_dropped_later_is_left_out_with_its_drop() -> None:
    statements = [
        'CREATE TABLE "S".a (created_by uuid)',
        _ADD.format(table="a", name="fk_a_users"),
        'CREATE INDEX ix ON "S".a (created_by)',
        _DROP.format(table="a", name="fk_a_users"),
        _ADD.format(table="a", name="fk_a_known_users"),
    ]

    assert _without_undone(statements) == [
        statements[0],
        statements[2],
        _ADD.format(table="a", name="fk_a_known_users"),
    ]


def test_only_the_same_key_of_the_same_table_cancels() -> None:
    statements = [
        _ADD.format(table="a", name="fk_x"),
        _ADD.format(table="b", name="fk_y"),
        _DROP.format(table="b", name="fk_x"),  # another table's key of that name
        _DROP.format(table="a", name="fk_z"),  # a constraint not added here
    ]

    assert _without_undone(statements) == statements


def test_a_key_added_again_after_its_drop_stays() -> None:
    statements = [
        _ADD.format(table="a", name="fk_x"),
        _DROP.format(table="a", name="fk_x"),
        _ADD.format(table="a", name="fk_x"),
    ]

    assert _without_undone(statements) == [statements[2]]


def test_a_drop_is_never_paired_with_a_key_added_after_it() -> None:
    statements = [_DROP.format(table="a", name="fk_x"), _ADD.format(table="a", name="fk_x")]

    assert _without_undone(statements) == statements
