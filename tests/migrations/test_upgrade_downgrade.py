"""Upgrades and downgrades, step by step, restore every schema exactly and keep the data.

Each test gets a new database (``empty_database_url``) with the users stand-in, but for the
step tests and those that move one tenant alone. The step tests are collected from head down to
base and walk down one fleet (:func:`fleet_at`, :func:`alpha_at`): a fleet made at head and
downgraded to a revision is what each of them needs, and going on down from where the last test
left it is the same downgrade, minus seconds of building a database per test (many more on
Citus). "Exactly" means equal catalog fingerprints (:mod:`tests.migrations.fingerprint`) of the
shared schema and of the tenant schemas, equal revisions, and equal rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Engine

from dms import migrations, provisioning, tenancy
from dms.config import SHARED_SCHEMA
from dms.testing import temporary_database
from dms.users import create_users_stand_in
from tests.migrations.fingerprint import (
    TENANTS,
    DdlAudit,
    Fingerprint,
    assert_registry_matches,
    build_fleet,
    fingerprint,
    populate_tenant,
    revisions,
    schema_exists,
    schema_rows,
)

SCHEMAS = (SHARED_SCHEMA, *(tenancy.schema_name(slug) for slug in TENANTS))


def _chain() -> list[tuple[str | None, str]]:
    """Every step of the chain from base to head, as ``(previous, revision)``."""
    script = ScriptDirectory.from_config(migrations.alembic_config())
    steps = []
    for script_revision in reversed(list(script.walk_revisions())):
        previous = script_revision.down_revision
        assert previous is None or isinstance(previous, str), "the chain must be linear"
        steps.append((previous, script_revision.revision))
    return steps


STEPS = _chain()
HEAD = STEPS[-1][1]
#: The steps from head down to base: the order in which one fleet can walk through them.
DOWNWARD = STEPS[::-1]


def _step_id(step: tuple[str | None, str]) -> str:
    return f"{step[0] or 'base'}->{step[1]}"


def _height(revision: str | None) -> int:
    """How far up the chain ``revision`` is (base: 0)."""
    return 0 if revision is None else [r for _, r in STEPS].index(revision) + 1


def _fingerprints(engine: Engine, schemas: tuple[str, ...] = SCHEMAS) -> dict[str, Fingerprint]:
    return {schema: fingerprint(engine, schema) for schema in schemas}


def _contents(engine: Engine, schemas: tuple[str, ...] = SCHEMAS) -> dict[str, Any]:
    return {schema: schema_rows(engine, schema) for schema in schemas}


def _without_audit_trail(contents: dict[str, Any]) -> dict[str, Any]:
    """Contents but what a downgrade drops by design: the audit trail (0013), access control
    (0016: its tables, and the owners and scopes of folders and documents)."""
    return {
        schema: {
            table: [row[: _ACCESS_COLUMNS_FROM[table]] for row in rows]
            if table in _ACCESS_COLUMNS_FROM
            else rows
            for table, rows in tables.items()
            if not table.startswith(("audit_", "access_"))
        }
        for schema, tables in contents.items()
    }


#: Where the columns that revision 0016 adds begin, in the rows of the tables it adds them to.
_ACCESS_COLUMNS_FROM = {"folders": 7, "documents": 9}


@pytest.fixture(scope="module")
def fleet_at(server_url: URL) -> Iterator[Callable[[str | None], Engine]]:
    """A function that gives a fleet made at head and downgraded to a revision.

    It downgrades the fleet of the last call when all its schemas are at one revision at or
    above this one, and makes a new database otherwise (the first call, a step test that ran out
    of order, or one that failed halfway: its failure stays its own).
    """
    with ExitStack() as current:
        engines: list[Engine] = []

        def at(revision: str | None) -> Engine:
            if not engines or not _can_go_down(engines[0], revision):
                current.close()
                engines[:] = [_new_fleet(current, server_url)]
            migrations.downgrade(engines[0], revision or "base")
            return engines[0]

        yield at


def _can_go_down(fleet: Engine, revision: str | None) -> bool:
    at = set(revisions(fleet, *SCHEMAS).values())  # at base, None for every schema
    return len(at) == 1 and _height(at.pop()) >= _height(revision)


def _new_fleet(stack: ExitStack, server_url: URL) -> Engine:
    url = stack.enter_context(temporary_database(server_url, prefix="dms_empty"))
    engine = sa.create_engine(url)
    stack.callback(engine.dispose)
    create_users_stand_in(engine)
    build_fleet(engine)
    return engine


@pytest.mark.parametrize("step", DOWNWARD, ids=_step_id)
def test_fleet_step_up_and_down_restores_every_schema(
    fleet_at: Callable[[str | None], Engine], step: tuple[str | None, str]
) -> None:
    previous, revision = step
    fleet = fleet_at(previous)
    before = _fingerprints(fleet)
    before_revisions = revisions(fleet, *SCHEMAS)
    before_rows = _contents(fleet)

    migrations.upgrade(fleet, revision)
    upgraded = revisions(fleet, *SCHEMAS)
    assert_registry_matches(fleet)
    migrations.downgrade(fleet, previous or "base")
    assert_registry_matches(fleet)

    assert upgraded[SHARED_SCHEMA] == revision
    # At base the shared downgrade drops the registry and with it every tenant schema.
    expected_tenant_revision = revision if previous is not None else None
    assert {upgraded[schema] for schema in SCHEMAS[1:]} == {expected_tenant_revision}
    assert _fingerprints(fleet) == before
    assert revisions(fleet, *SCHEMAS) == before_revisions
    assert _contents(fleet) == before_rows


@pytest.fixture(scope="module")
def module_fleet(server_url: URL) -> Iterator[Engine]:
    """The ``fleet`` fixture's database, made once for the tests of the module that use it."""
    with temporary_database(server_url, prefix="dms_empty") as url:
        engine = sa.create_engine(url)
        create_users_stand_in(engine)
        build_fleet(engine)
        yield engine
        engine.dispose()


@pytest.fixture
def tenant_fleet(module_fleet: Engine) -> Engine:
    """The module's fleet with ``alpha`` created anew at head and filled, as in a new ``fleet``.

    For tests that move ``alpha`` alone (and check that the shared schema and ``bravo`` stay at
    head, untouched): a new ``alpha`` is all they need of a new database, which costs each test
    seconds to create and migrate (more on Citus).
    """
    _renew_alpha(module_fleet)
    return module_fleet


def _renew_alpha(fleet: Engine) -> None:
    provisioning.drop_tenant(fleet, TENANTS[0])
    provisioning.create_tenant(fleet, TENANTS[0])
    populate_tenant(fleet, TENANTS[0])


@pytest.fixture
def alpha_at(module_fleet: Engine) -> Callable[[str | None], Engine]:
    """A function that gives the module's fleet with ``alpha`` made at head and downgraded.

    As :func:`fleet_at`: ``alpha`` goes on down from where it is when it is at or above the
    revision, and is made anew otherwise.
    """

    def at(revision: str | None) -> Engine:
        schema = tenancy.schema_name(TENANTS[0])
        if _height(revisions(module_fleet, schema)[schema]) < _height(revision):
            _renew_alpha(module_fleet)
        migrations.downgrade(module_fleet, revision or "base", tenant=TENANTS[0])
        return module_fleet

    return at


@pytest.mark.parametrize("step", DOWNWARD, ids=_step_id)
def test_tenant_step_up_and_down_restores_the_tenant(
    alpha_at: Callable[[str | None], Engine], step: tuple[str | None, str]
) -> None:
    previous, revision = step
    fleet = alpha_at(previous)
    before = _fingerprints(fleet)
    before_rows = _contents(fleet, SCHEMAS[2:])

    migrations.upgrade(fleet, revision, tenant="alpha")
    upgraded = _fingerprints(fleet)
    assert_registry_matches(fleet)
    assert revisions(fleet, *SCHEMAS) == {
        SHARED_SCHEMA: HEAD,
        "tenant_alpha": revision,
        "tenant_bravo": HEAD,
    }
    migrations.downgrade(fleet, previous or "base", tenant="alpha")
    assert_registry_matches(fleet)

    if revision == HEAD:
        # Built step by step, a tenant equals one that was created at head.
        assert upgraded["tenant_alpha"] == upgraded["tenant_bravo"]
    assert _fingerprints(fleet) == before
    assert revisions(fleet, "tenant_alpha")["tenant_alpha"] == previous
    assert _contents(fleet, SCHEMAS[2:]) == before_rows


def test_each_step_changes_the_schema_it_migrates(tenant_fleet: Engine) -> None:
    fleet = tenant_fleet
    """A guard on the round-trip tests: each step's upgrade really does something."""
    migrations.downgrade(fleet, "base", tenant="alpha")
    seen = [fingerprint(fleet, "tenant_alpha")]
    for _previous, revision in STEPS:
        migrations.upgrade(fleet, revision, tenant="alpha")
        seen.append(fingerprint(fleet, "tenant_alpha"))

    assert seen[0].is_empty
    assert not seen[-1].is_empty
    assert seen[-1] == fingerprint(fleet, "tenant_bravo")


def test_upgrade_of_an_empty_database_reaches_head(db: Engine) -> None:
    migrations.upgrade(db)
    empty = migrations.fleet_status(db)
    for slug in TENANTS:
        provisioning.create_tenant(db, slug)
    status = migrations.fleet_status(db)

    assert empty.shared_revision == HEAD
    assert empty.tenants == ()
    assert status.healthy
    assert [(t.slug, t.revision) for t in status.tenants] == [(slug, HEAD) for slug in TENANTS]
    assert "tenants" in {row[0] for row in fingerprint(db, SHARED_SCHEMA).tables}


def test_upgrade_of_an_existing_database_keeps_the_data(fleet: Engine) -> None:
    previous = STEPS[-1][0]
    rows = _contents(fleet)
    shape = _fingerprints(fleet)

    if previous is not None:  # one step back everywhere, then forward again
        migrations.downgrade(fleet, previous)
        assert set(revisions(fleet, *SCHEMAS).values()) == {previous}
        migrations.upgrade(fleet)
    # One tenant back to base and forward again; the others must not notice.
    migrations.downgrade(fleet, "base", tenant="bravo")
    migrations.upgrade(fleet)

    assert set(revisions(fleet, *SCHEMAS).values()) == {HEAD}
    assert _fingerprints(fleet) == shape
    # Stepping back over revisions 0013 and 0016 drops the audit trail and access control with
    # their tables (docs/audit.md, docs/access.md): gone by design, everything else is kept.
    assert _without_audit_trail(_contents(fleet, SCHEMAS[:2])) == _without_audit_trail(
        {schema: rows[schema] for schema in SCHEMAS[:2]}
    )
    bravo = schema_rows(fleet, "tenant_bravo")
    assert all(not rows for rows in _without_audit_trail({"b": bravo})["b"].values())
    assert [head[:3] for head in bravo["audit_chain"]] == [(True, 0, bytes(32))]  # genesis


_WRITE = re.compile(
    r"\s*(CREATE|ALTER|DROP|COMMENT|GRANT|REVOKE|TRUNCATE|INSERT|UPDATE|DELETE)\b", re.IGNORECASE
)


def test_second_upgrade_changes_nothing(fleet: Engine) -> None:
    audit = DdlAudit(fleet)
    shape = _fingerprints(fleet)
    rows = _contents(fleet)
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(str(args[2]))

    sa.event.listen(fleet, "before_cursor_execute", record)
    try:
        migrations.upgrade(fleet)
    finally:
        sa.event.remove(fleet, "before_cursor_execute", record)

    # Server side: no object was created, altered or dropped, by any connection.
    assert audit.commands() == []
    # Client side: not one statement that could change a schema or a row, not even a
    # CREATE ... IF NOT EXISTS (which needs CREATE privilege on the database).
    assert [s for s in statements if _WRITE.match(s)] == []
    assert statements, "the listener saw nothing: it would pass vacuously"
    assert _fingerprints(fleet) == shape
    assert _contents(fleet) == rows


def test_downgrade_to_base_then_upgrade_to_head(fleet: Engine) -> None:
    shape = _fingerprints(fleet)

    migrations.downgrade(fleet, "base")
    at_base = migrations.fleet_status(fleet)
    dropped = [schema_exists(fleet, schema) for schema in SCHEMAS[1:]]
    shared_at_base = fingerprint(fleet, SHARED_SCHEMA)
    migrations.upgrade(fleet)
    for slug in TENANTS:
        provisioning.create_tenant(fleet, slug)

    assert at_base.shared_revision is None
    assert at_base.tenants == ()
    assert dropped == [False, False]
    assert shared_at_base.is_empty
    assert migrations.fleet_status(fleet).healthy
    assert _fingerprints(fleet) == shape


def test_tenant_option_migrates_that_tenant_only(tenant_fleet: Engine) -> None:
    fleet = tenant_fleet
    shape = _fingerprints(fleet)
    rows = _contents(fleet)

    migrations.downgrade(fleet, "base", tenant="alpha")
    down = revisions(fleet, *SCHEMAS)
    alpha_at_base = fingerprint(fleet, "tenant_alpha")
    bravo_and_shared = _fingerprints(fleet, (SHARED_SCHEMA, "tenant_bravo"))
    migrations.upgrade(fleet, tenant="alpha")

    assert down == {SHARED_SCHEMA: HEAD, "tenant_alpha": None, "tenant_bravo": HEAD}
    assert alpha_at_base.is_empty
    assert bravo_and_shared == {s: shape[s] for s in (SHARED_SCHEMA, "tenant_bravo")}
    assert revisions(fleet, *SCHEMAS) == dict.fromkeys(SCHEMAS, HEAD)
    assert _fingerprints(fleet) == shape
    assert _contents(fleet, (SHARED_SCHEMA, "tenant_bravo")) == {
        s: rows[s] for s in (SHARED_SCHEMA, "tenant_bravo")
    }
