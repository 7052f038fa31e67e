"""The recording that new tenants are created from: where the schema name goes, and refusals."""

from __future__ import annotations

import pytest
from psycopg import sql

from dms.migrations.template import TemplateError, TenantTemplate, _cut

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
