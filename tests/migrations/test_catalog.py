"""The drift check's catalog reader sees every object of a schema, named in full.

:mod:`dms.migrations.catalog` finds a schema's relations through ``pg_depend`` (scanning
``pg_class`` for each query made ``dms check`` quadratic in the fleet's size). The test
fingerprint (tests/migrations/fingerprint.py) reads ``pg_class`` by namespace, the plain way;
the two must name the same objects, including relations of kinds dms never creates, a table
moved into the schema after it was created, and names of more than 63 characters
(``table.constraint``).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms.migrations.catalog import fingerprints, rows
from tests.migrations.fingerprint import Fingerprint, fingerprint

_EXTRAS = (
    "CREATE TABLE tenant_alpha.extra (id int PRIMARY KEY, n int CHECK (n > 0))",
    "CREATE INDEX ix_extra_n ON tenant_alpha.extra (n)",
    "CREATE VIEW tenant_alpha.extra_view AS SELECT id FROM tenant_alpha.extra",
    "CREATE SEQUENCE tenant_alpha.extra_seq",
    "CREATE TABLE public.moved_in (id int PRIMARY KEY)",
    "ALTER TABLE public.moved_in SET SCHEMA tenant_alpha",
)


def _oracle_names(found: Fingerprint) -> set[tuple[str, str]]:
    """(kind, name) of every object of the test fingerprint, named as the catalog names them."""
    names = {("table", str(row[0])) for row in found.tables}
    names |= {("column", f"{row[0]}.{row[1]}") for row in found.columns}
    names |= {("constraint", f"{row[0]}.{row[1]}") for row in found.constraints}
    names |= {("index", f"{row[0]}.{row[1]}") for row in found.indexes}
    names |= {("trigger", f"{row[0]}.{row[1]}") for row in found.triggers}
    names |= {("policy", f"{row[0]}.{row[1]}") for row in found.policies if row[1]}
    return names | {("function", f"{row[0]}({row[1]})") for row in found.functions}


def test_the_catalog_names_what_pg_class_holds_for_the_schema(fleet: Engine) -> None:
    with fleet.begin() as conn:
        for statement in _EXTRAS:
            conn.execute(sa.text(statement))

    with fleet.connect() as conn:
        found = {(row.kind, row.name) for row in rows(conn, "tenant_alpha")}
        oracle = _oracle_names(fingerprint(conn, "tenant_alpha"))

    assert found == oracle
    assert {
        ("table", "extra"),
        ("table", "extra_view"),
        ("table", "extra_seq"),
        ("table", "moved_in"),
        ("index", "extra.ix_extra_n"),
        ("index", "moved_in.moved_in_pkey"),
        ("constraint", "extra.extra_n_check"),
        ("column", "extra_view.id"),
    } <= found


def test_digests_tell_a_changed_schema_from_its_twin(fleet: Engine) -> None:
    with fleet.connect() as conn:
        before = fingerprints(conn, ["tenant_alpha", "tenant_bravo", "tenant_none"])
    with fleet.begin() as conn:
        conn.execute(sa.text("CREATE SEQUENCE tenant_alpha.extra_seq"))
    with fleet.connect() as conn:
        after = fingerprints(conn, ["tenant_alpha", "tenant_bravo"])

    assert before["tenant_alpha"] == before["tenant_bravo"] != ""
    assert before["tenant_none"] == ""
    assert after["tenant_bravo"] == before["tenant_bravo"]
    assert after["tenant_alpha"] != before["tenant_alpha"]
