"""Tenant keys: ``^[a-z][a-z0-9_]{0,39}$``, not reserved, checked without a database."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms.errors import InvalidTenantName
from dms.tenancy import schema_name, slug_of_schema, validate_slug

SLUG = re.compile(r"[a-z][a-z0-9_]{0,39}")
RESERVED = frozenset({"dms", "public", "information_schema"})


def is_reserved(slug: str) -> bool:
    return slug.startswith("pg_") or slug in RESERVED


BAD_NAMES: dict[str, object] = {
    "single quote": "acme'",
    "double quote": 'ac"me',
    "semicolon": "acme;drop",
    "injection": "x; DROP SCHEMA dms CASCADE; --",
    "space": "ac me",
    "leading space": " acme",
    "trailing newline": "acme\n",
    "tab": "ac\tme",
    "nul byte": "ac\x00me",
    "hyphen": "ac-me",
    "dot": "ac.me",
    "uppercase": "Acme",
    "uppercase inside": "acMe",
    "leading digit": "1acme",
    "leading underscore": "_acme",
    "41 characters": "a" * 41,
    "empty": "",
    "non-ascii letter": "acmé",
    "non-ascii digit": "acme\u0661",
    "fullwidth letter": "\uff41cme",
    "dotless i": "\u0131",
    "pg_ prefix": "pg_acme",
    "bare pg_": "pg_",
    "reserved dms": "dms",
    "reserved public": "public",
    "reserved information_schema": "information_schema",
    "None": None,
    "int": 42,
    "bytes": b"acme",
    "list": ["acme"],
}


@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_bad_name_is_rejected(name: object) -> None:
    with pytest.raises(InvalidTenantName):
        validate_slug(name)


@pytest.mark.parametrize("name", ["a", "acme", "acme_2", "a" * 40, "pg", "pgx_acme", "dms2"])
def test_good_name_is_accepted(name: str) -> None:
    assert validate_slug(name) == name


def test_invalid_tenant_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid tenant name"):
        validate_slug("Bad Name")


@pytest.mark.parametrize("name", ["acme'", "pg_acme", ""])
def test_schema_name_rejects_bad_names(name: str) -> None:
    with pytest.raises(InvalidTenantName):
        schema_name(name)


@given(st.text(max_size=45).filter(lambda name: SLUG.fullmatch(name) is None))
def test_any_string_off_the_pattern_is_rejected(name: str) -> None:
    with pytest.raises(InvalidTenantName):
        validate_slug(name)


@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzA_0-9 .;'\"", max_size=42).filter(
        lambda name: SLUG.fullmatch(name) is None
    )
)
def test_near_miss_is_rejected(name: str) -> None:
    with pytest.raises(InvalidTenantName):
        validate_slug(name)


@given(st.from_regex(SLUG, fullmatch=True).filter(lambda name: not is_reserved(name)))
def test_any_unreserved_string_on_the_pattern_is_accepted(name: str) -> None:
    assert validate_slug(name) == name
    assert schema_name(name) == f"tenant_{name}"
    assert slug_of_schema(schema_name(name)) == name


@given(st.from_regex(r"pg_[a-z0-9_]{0,37}", fullmatch=True))
def test_any_pg_prefixed_name_is_rejected(name: str) -> None:
    with pytest.raises(InvalidTenantName, match="reserved"):
        validate_slug(name)


@pytest.mark.parametrize("schema", ["public", "dms", "tenant_", "tenant_Acme", "tenants_acme"])
def test_slug_of_a_non_tenant_schema_is_none(schema: str) -> None:
    assert slug_of_schema(schema) is None
