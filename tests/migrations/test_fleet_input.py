"""Hostile arguments to the fleet operations: refused with ``ValidationError`` before any SQL.

The fleet functions (``create_tenants``, ``drop_tenants``, ``upgrade``, ``downgrade`` and
``downgrade_target``, ``move_tenant``) take, beside tenant names (each refused alone, tested in
test_bulk_create.py), a list of names, a number of worker processes, a revision and flags. A
caller who gets one of those wrong must learn it before anything happens: a single string is
not a list of names (``drop_tenants(engine, "am")`` would otherwise drop tenants ``a`` and
``m``), ``jobs=0`` or ``"2"`` is not a number of processes, ``None`` or ``""`` is not a
revision, ``"no"`` is not false.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import event as sa_event
from sqlalchemy.engine import URL, Engine

from dms import migrations, placement, provisioning, tenancy
from dms.errors import MigrationError, MigrationFailed, ValidationError
from dms.migrations import Scripts
from dms.testing import temporary_database
from dms.users import create_users_stand_in
from tests.hostile import NOT_TEXT, texts

HEAD = migrations.head_revision()
PREVIOUS = Scripts.default().chain()[-2]
#: The fleet every example starts from: single letters, so that a string is a list of them.
FLEET = ["a", "m"]
EXAMPLES = 25

#: A fleet operation called with one drawn value in the place under test.
Operation = Callable[[Engine, Any], object]

JOBS: dict[str, Operation] = {
    "create_tenants": lambda e, v: provisioning.create_tenants(e, ["fresh"], jobs=v),
    "drop_tenants": lambda e, v: provisioning.drop_tenants(e, ["a"], jobs=v),
    "upgrade": lambda e, v: migrations.upgrade(e, jobs=v),
    "downgrade": lambda e, v: migrations.downgrade(e, PREVIOUS, jobs=v),
}
NAME_LISTS: dict[str, Operation] = {
    "create_tenants": provisioning.create_tenants,
    "drop_tenants": provisioning.drop_tenants,
}
REVISIONS: dict[str, Operation] = {
    "upgrade": migrations.upgrade,
    "downgrade": migrations.downgrade,
    "downgrade_target": migrations.downgrade_target,
}
FLAGS: dict[str, Operation] = {
    "create_tenants": lambda e, v: provisioning.create_tenants(e, ["fresh"], if_not_exists=v),
    "drop_tenants": lambda e, v: provisioning.drop_tenants(e, ["a"], if_exists=v),
}
NODES: dict[str, Operation] = {
    "move_tenant": lambda e, v: placement.move_tenant(e, "a", v),
}

TEXT = texts([1, 40, 41])
NOT_A_NUMBER_OF_PROCESSES = st.one_of(NOT_TEXT, TEXT, st.integers(max_value=0))
NOT_A_LIST_OF_NAMES = st.one_of(st.sampled_from(["am", "a", "", b"am"]), TEXT, NOT_TEXT)
NOT_A_REVISION = st.one_of(
    st.sampled_from(["", " ", "\t"]), NOT_TEXT, st.text().map(lambda tail: "\x00" + tail)
)


@pytest.fixture
def small_fleet(db: Engine) -> Engine:
    migrations.upgrade(db)
    provisioning.create_tenants(db, FLEET, jobs=1)
    return db


@pytest.fixture(scope="module")
def refusing_fleet(server_url: URL) -> Iterator[Engine]:
    """:func:`small_fleet` made once for the tests whose every call is refused before any SQL.

    Each of them checks that no statement was sent and the fleet is whole after each call, so
    that none can pass on what another changed; a new database each cost them a second.
    """
    with temporary_database(server_url, prefix="dms_empty") as url:
        engine = sa.create_engine(url)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        provisioning.create_tenants(engine, FLEET, jobs=1)
        yield engine
        engine.dispose()


@contextmanager
def statements_sent(engine: Engine) -> Iterator[list[str]]:
    """Every statement sent through ``engine`` in the block."""
    sent: list[str] = []

    def record(**arguments: Any) -> None:
        sent.append(arguments["statement"])

    sa_event.listen(engine, "before_cursor_execute", record, named=True)
    try:
        yield sent
    finally:
        sa_event.remove(engine, "before_cursor_execute", record)


def assert_refused_before_any_sql(engine: Engine, operation: Operation, value: Any) -> None:
    with statements_sent(engine) as sent, pytest.raises(ValidationError):
        operation(engine, value)
    assert sent == []
    assert [tenant.slug for tenant in tenancy.list_tenants(engine)] == FLEET


HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # examples change nothing
)


@HYPOTHESIS
@given(jobs=NOT_A_NUMBER_OF_PROCESSES, operation=st.sampled_from(sorted(JOBS)))
def test_jobs_that_are_not_a_positive_int_are_refused(
    refusing_fleet: Engine, jobs: Any, operation: str
) -> None:
    # None: the default (this process); "auto": as many as the fleet calls for.
    assume(jobs is not None and jobs != "auto" and not (type(jobs) is int and jobs >= 1))
    assert_refused_before_any_sql(refusing_fleet, JOBS[operation], jobs)


@HYPOTHESIS
@given(names=NOT_A_LIST_OF_NAMES, operation=st.sampled_from(sorted(NAME_LISTS)))
def test_names_that_are_not_an_iterable_of_names_are_refused(
    refusing_fleet: Engine, names: Any, operation: str
) -> None:
    assume(isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"))
    assert_refused_before_any_sql(refusing_fleet, NAME_LISTS[operation], names)


def test_one_string_drops_no_tenant_named_by_its_letters(refusing_fleet: Engine) -> None:
    assert_refused_before_any_sql(refusing_fleet, NAME_LISTS["drop_tenants"], "am")


@HYPOTHESIS
@given(revision=NOT_A_REVISION, operation=st.sampled_from(sorted(REVISIONS)))
def test_a_revision_that_is_not_text_is_refused(
    refusing_fleet: Engine, revision: Any, operation: str
) -> None:
    assert_refused_before_any_sql(refusing_fleet, REVISIONS[operation], revision)


@HYPOTHESIS
@given(flag=NOT_TEXT | TEXT, operation=st.sampled_from(sorted(FLAGS)))
def test_a_flag_that_is_not_a_bool_is_refused(
    refusing_fleet: Engine, flag: Any, operation: str
) -> None:
    assume(not isinstance(flag, bool))
    assert_refused_before_any_sql(refusing_fleet, FLAGS[operation], flag)


@HYPOTHESIS
@given(node=NOT_TEXT | TEXT.map(lambda text: text + "\x00"))
def test_a_node_that_is_not_text_is_refused(refusing_fleet: Engine, node: Any) -> None:
    assert_refused_before_any_sql(refusing_fleet, NODES["move_tenant"], node)


def test_good_arguments_are_accepted(small_fleet: Engine) -> None:
    """Control: the same calls with good values run (so the refusals above are the values')."""
    provisioning.create_tenants(small_fleet, iter(["fresh"]), jobs=1, if_not_exists=False)
    migrations.downgrade(small_fleet, PREVIOUS, jobs=1)
    migrations.upgrade(small_fleet, "head", jobs=1)
    provisioning.drop_tenants(small_fleet, ("fresh",), jobs=1, if_exists=True)
    assert [tenant.slug for tenant in tenancy.list_tenants(small_fleet)] == FLEET


def fleet_revisions(engine: Engine) -> dict[str, str | None]:
    status = migrations.fleet_status(engine)
    return {"shared": status.shared_revision} | {s.slug: s.revision for s in status.tenants}


def test_a_downgrade_to_a_later_revision_is_refused_before_any_change(small_fleet: Engine) -> None:
    migrations.downgrade(small_fleet, PREVIOUS)
    before = fleet_revisions(small_fleet)

    with pytest.raises(MigrationError, match=f"{HEAD}: it is above {PREVIOUS}") as refused:
        migrations.downgrade(small_fleet, HEAD)
    with pytest.raises(MigrationError, match="it is above"):
        migrations.downgrade(small_fleet, "+1")

    assert not isinstance(refused.value, MigrationFailed)  # refused whole, not tenant by tenant
    assert fleet_revisions(small_fleet) == before


def test_an_upgrade_to_an_earlier_revision_is_refused_before_any_change(
    small_fleet: Engine,
) -> None:
    before = fleet_revisions(small_fleet)

    with pytest.raises(MigrationError, match=f"{PREVIOUS}: it is below {HEAD}") as refused:
        migrations.upgrade(small_fleet, PREVIOUS)

    assert not isinstance(refused.value, MigrationFailed)
    assert fleet_revisions(small_fleet) == before


def test_a_wrong_way_target_without_tenants_is_a_migration_error(db: Engine) -> None:
    """No tenant fails first here: the shared schema is the first to meet the target."""
    migrations.upgrade(db, PREVIOUS)

    with pytest.raises(MigrationError, match="it is above"):
        migrations.downgrade(db, "+1")

    assert fleet_revisions(db) == {"shared": PREVIOUS}


def test_a_tenant_behind_the_shared_schema_is_upgraded_alone_to_an_earlier_target(
    small_fleet: Engine,
) -> None:
    """Control: the check counts from the anchor, here the tenant, not the shared schema."""
    earlier = Scripts.default().chain()[-3]
    migrations.downgrade(small_fleet, earlier, tenant="a")

    migrations.upgrade(small_fleet, PREVIOUS, tenant="a")

    assert fleet_revisions(small_fleet) == {"shared": HEAD, "a": PREVIOUS, "m": HEAD}
