"""The registry's copy of each tenant's revision: written with the schema's own, trusted, checked.

``dms status`` and a no-op ``dms migrate`` read ``dms.tenants.revision`` instead of every
tenant's version table. These tests corrupt one side or the other with raw SQL to show which
side each operation reads, that ``dms check`` finds the difference, that the way out it names
works, and that every path which moves a tenant's version row moves the copy in the same
transaction (and a failed or refused one moves neither).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms import migrations, provisioning
from dms.config import SHARED_SCHEMA, settings_of
from dms.errors import InvalidTenantName, MigrationError, MigrationFailed
from dms.fleet.report import Outcome
from dms.migrations import MigrationScope, Scripts, migrate_schema
from dms.migrations.drift import check_drift
from tests.migrations.fingerprint import (
    TENANTS,
    assert_registry_matches,
    fingerprint,
    registry_revisions,
    revisions,
    run_alembic,
)

HEAD = migrations.head_revision()
#: The revision before the one that added the registry's copy.
BEFORE_COPY = "0006"
PREVIOUS = Scripts.default().chain()[-2]


def _set_registry(engine: Engine, slug: str, revision: str | None) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE dms.tenants SET revision = :r WHERE slug = :s"),
            {"r": revision, "s": slug},
        )


def _by_slug(engine: Engine) -> dict[str, str | None]:
    return {t.slug: t.revision for t in migrations.fleet_status(engine).tenants}


def test_created_tenants_are_recorded_at_head(fleet: Engine) -> None:
    assert registry_revisions(fleet) == {f"tenant_{slug}": HEAD for slug in TENANTS}
    assert_registry_matches(fleet)


def test_status_reads_the_registry_and_check_reports_a_schema_that_differs(
    fleet: Engine,
) -> None:
    # The schema one revision behind, the registry's copy saying head.
    migrations.downgrade(fleet, PREVIOUS, tenant="alpha")
    _set_registry(fleet, "alpha", HEAD)

    status = migrations.fleet_status(fleet)
    drift = check_drift(fleet)

    assert _by_slug(fleet) == {"alpha": HEAD, "bravo": HEAD}
    assert status.healthy
    [wrong] = drift.drifted
    assert wrong.tenant == "alpha"
    assert wrong.problem.startswith(f"at {PREVIOUS}, not at head {HEAD}")
    assert (
        f"registry records {HEAD}, the schema is at {PREVIOUS}: "
        "run dms migrate --tenant alpha" in wrong.problem
    )
    # A fleet upgrade trusts the copy: alpha is skipped without its schema being opened.
    report = migrations.upgrade(fleet)
    assert {t.tenant: t.outcome for t in report.tenants} == {
        "alpha": Outcome.SKIPPED,
        "bravo": Outcome.SKIPPED,
    }
    assert revisions(fleet, "tenant_alpha")["tenant_alpha"] == PREVIOUS

    # The way out that check names: the tenant is migrated from its own version table.
    migrations.upgrade(fleet, tenant="alpha")

    assert revisions(fleet, "tenant_alpha")["tenant_alpha"] == HEAD
    assert_registry_matches(fleet)
    assert check_drift(fleet).clean


def test_a_wrong_copy_is_reported_and_corrected_by_the_next_upgrade(fleet: Engine) -> None:
    _set_registry(fleet, "bravo", BEFORE_COPY)

    assert _by_slug(fleet)["bravo"] == BEFORE_COPY
    assert not migrations.fleet_status(fleet).healthy
    [wrong] = check_drift(fleet).drifted
    assert wrong.tenant == "bravo"
    assert wrong.problem == (
        f"registry records {BEFORE_COPY}, the schema is at {HEAD}: run dms migrate --tenant bravo"
    )
    before = fingerprint(fleet, "tenant_bravo")

    report = migrations.upgrade(fleet)

    [bravo] = [t for t in report.tenants if t.tenant == "bravo"]
    assert (bravo.outcome, bravo.from_revision, bravo.to_revision) == (Outcome.SKIPPED, HEAD, HEAD)
    assert fingerprint(fleet, "tenant_bravo") == before
    assert_registry_matches(fleet)
    assert migrations.fleet_status(fleet).healthy
    assert check_drift(fleet).clean


def test_tenant_at_base_is_recorded_as_null(fleet: Engine) -> None:
    migrations.downgrade(fleet, "base", tenant="alpha")

    assert registry_revisions(fleet) == {"tenant_alpha": None, "tenant_bravo": HEAD}
    assert _by_slug(fleet) == {"alpha": None, "bravo": HEAD}


def test_plain_alembic_downgrade_and_stamp_write_the_copy(
    fleet: Engine, empty_database_url: URL
) -> None:
    down = run_alembic(empty_database_url, "-x", "tenant=alpha", "downgrade", "0003")
    assert down.returncode == 0, down.stdout + down.stderr
    assert registry_revisions(fleet) == {"tenant_alpha": "0003", "tenant_bravo": HEAD}

    # Stamped back from 0007, where it really is: 0006 and 0007 run again without harm.
    migrations.downgrade(fleet, "0007", tenant="bravo")
    stamped = run_alembic(empty_database_url, "-x", "tenant=bravo", "stamp", "0005")
    assert stamped.returncode == 0, stamped.stdout + stamped.stderr
    assert registry_revisions(fleet) == {"tenant_alpha": "0003", "tenant_bravo": "0005"}
    assert_registry_matches(fleet)

    up = run_alembic(empty_database_url, "upgrade", "head")
    assert up.returncode == 0, up.stdout + up.stderr
    assert registry_revisions(fleet) == {"tenant_alpha": HEAD, "tenant_bravo": HEAD}
    assert_registry_matches(fleet)


def test_a_failed_tenant_migration_moves_neither_the_schema_nor_the_copy(fleet: Engine) -> None:
    # Something outside the tenant depends on its table: the first revision cannot drop it.
    with fleet.begin() as conn:
        conn.execute(
            sa.text("CREATE VIEW public.alpha_documents AS SELECT * FROM tenant_alpha.documents")
        )
    try:
        with pytest.raises(MigrationFailed):
            migrations.downgrade(fleet, "base", tenant="alpha")

        assert revisions(fleet, "tenant_alpha")["tenant_alpha"] == HEAD
        assert registry_revisions(fleet) == {"tenant_alpha": HEAD, "tenant_bravo": HEAD}
    finally:
        with fleet.begin() as conn:
            conn.execute(sa.text("DROP VIEW public.alpha_documents"))


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda e: migrations.upgrade(e, "no_such_revision"), MigrationError),
        (lambda e: migrations.downgrade(e, BEFORE_COPY, tenant="Not A Name"), InvalidTenantName),
        (lambda e: provisioning.create_tenant(e, "pg_reserved"), InvalidTenantName),
    ],
    ids=["unknown-revision", "bad-tenant", "reserved-name"],
)
def test_bad_input_changes_neither_side(
    fleet: Engine, call: object, error: type[Exception]
) -> None:
    before = (registry_revisions(fleet), revisions(fleet, SHARED_SCHEMA, "tenant_alpha"))

    with pytest.raises(error):
        call(fleet)  # type: ignore[operator]

    assert (registry_revisions(fleet), revisions(fleet, SHARED_SCHEMA, "tenant_alpha")) == before


def test_upgrade_to_0007_fills_the_copy_from_every_version_table_without_keeping_their_locks(
    fleet: Engine,
) -> None:
    migrations.downgrade(fleet, BEFORE_COPY)
    migrations.downgrade(fleet, "0003", tenant="alpha")
    migrations.downgrade(fleet, "base", tenant="bravo")
    provisioning.create_tenant(fleet, "charlie")  # at the head of the scripts, 0007
    assert registry_revisions(fleet) is None
    settings = settings_of(fleet)

    with fleet.begin() as conn:
        migrate_schema(conn, MigrationScope.shared(settings), "0007")
        locked = conn.scalars(
            sa.text(
                "SELECT n.nspname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE l.pid = pg_backend_pid() AND n.nspname LIKE 'tenant%'"
            )
        ).all()

    assert locked == []
    assert registry_revisions(fleet) == {
        "tenant_alpha": "0003",
        "tenant_bravo": None,
        "tenant_charlie": HEAD,
    }
    assert_registry_matches(fleet)
