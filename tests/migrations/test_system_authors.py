"""Migration 0031: rows a system principal made name no user; the downgrade refuses while any
remain, and leaves the tenant as it was."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import migrations, tenancy
from dms.errors import MigrationFailed
from dms.schema import tenant as t
from dms.uow import UnitOfWork
from tests.migrations.fingerprint import fingerprint, revisions


def test_downgrade_refuses_while_system_made_rows_remain_and_goes_once_they_do_not(
    fleet: Engine,
) -> None:
    migrations.downgrade(fleet, "0031")  # this test is about 0031's own downgrade
    with UnitOfWork(fleet, tenant="alpha", system="classifier") as uow:
        tag = uow.tags.add(name="scanned")
        uow.folders.add(name="Incoming")
        uow.commit()
    before = fingerprint(fleet, "tenant_alpha")

    with pytest.raises(MigrationFailed) as refused:
        migrations.downgrade(fleet, "0030", tenant="alpha")
    kept = revisions(fleet, "tenant_alpha")
    after_refusal = fingerprint(fleet, "tenant_alpha")
    with fleet.begin() as conn:
        routed = tenancy.route(conn, "alpha")
        routed.execute(sa.delete(t.tags).where(t.tags.c.id == tag.id))
        routed.execute(sa.delete(t.folders).where(t.folders.c.created_by.is_(None)))
    migrations.downgrade(fleet, "0030", tenant="alpha")

    assert "rows made by a system principal name no user (1 in folders, 1 in tags)" in str(
        refused.value
    )
    assert kept == {"tenant_alpha": "0031"}
    assert after_refusal == before
    assert revisions(fleet, "tenant_alpha") == {"tenant_alpha": "0030"}
