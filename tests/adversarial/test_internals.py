"""Tables the application may not write as it likes (findings 5 and 7 of the review,
docs/security.md): a tenant's settings need manage at the root and are audited; a known user
cannot be deleted by the application role (it took the user's entries and memberships with it).
"""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from dms.errors import PermissionDenied
from dms.uow import UnitOfWork
from tests.adversarial.conftest import World, raw_as, read_as_system, refused_as

SETTINGS_EVENTS = (
    "SELECT object_type, action, actor_id FROM {s}.audit_events"
    " WHERE object_type IN ('audit_setting', 'search_setting') ORDER BY occurred_at"
)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO {s}.audit_settings (singleton, record_reads) VALUES (true, false)"
        " ON CONFLICT (singleton) DO UPDATE SET record_reads = false",
        "INSERT INTO {s}.search_settings (singleton, text_search_config) VALUES (true, 'english')"
        " ON CONFLICT (singleton) DO UPDATE SET text_search_config = 'english'",
        "DELETE FROM {s}.audit_settings",
    ],
)
def test_a_user_without_manage_at_the_root_cannot_change_a_setting(
    engine: Engine, app_engine: Engine, world: World, statement: str
) -> None:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.admin) as uow:
        uow.audit.set_record_reads(True)
        uow.commit()
    settings = "SELECT record_reads FROM {s}.audit_settings"
    events = read_as_system(engine, world, SETTINGS_EVENTS)

    assert refused_as(app_engine, world, world.eve, statement) == "42501"

    assert read_as_system(engine, world, settings) == [(True,)]
    assert read_as_system(engine, world, SETTINGS_EVENTS) == events


def test_through_the_library_too(app_engine: Engine, world: World) -> None:
    eve = UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve)
    with eve as uow, pytest.raises(PermissionDenied):
        uow.audit.set_record_reads(False)
    eve = UnitOfWork(app_engine, tenant=world.tenant, user_id=world.eve)
    with eve as uow, pytest.raises(PermissionDenied):
        uow.search.set_config("english")


def test_a_settings_change_by_who_may_is_in_the_trail(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=world.tenant, user_id=world.admin) as uow:
        uow.audit.set_record_reads(True)
        uow.search.set_config("english")
        uow.commit()

    events = read_as_system(engine, world, SETTINGS_EVENTS)
    assert [event[:2] for event in events] == [
        ("audit_setting", "create"),
        ("search_setting", "create"),
    ]
    assert {event[2] for event in events} == {world.admin}


def test_a_known_user_cannot_be_deleted_through_the_application_role(
    engine: Engine, app_engine: Engine, world: World
) -> None:
    entries_of_admin = f"SELECT count(*) FROM {{s}}.access_entries WHERE user_id = '{world.admin}'"
    before = read_as_system(engine, world, entries_of_admin)

    sqlstate = refused_as(
        app_engine, world, world.eve, f"DELETE FROM {{s}}.known_users WHERE id = '{world.admin}'"
    )

    assert sqlstate == "42501"
    assert read_as_system(engine, world, entries_of_admin) == before == [(1,)]
    assert raw_as(app_engine, world, world.eve, "SELECT 1 FROM {s}.known_users") >= 2
