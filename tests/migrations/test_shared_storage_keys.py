"""Migration 0004: storage keys may be shared; its downgrade refuses while they are."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import migrations, tenancy
from dms.errors import MigrationFailed
from dms.schema import tenant as t
from dms.testing.factories import DocumentFactory, RevisionFactory
from dms.users import create_user
from tests.migrations.fingerprint import fingerprint, revisions

SHARED_KEY = "alpha/sha256/ab/" + "ab" * 32


def _share_a_key(engine: Engine) -> list[uuid.UUID]:
    with engine.begin() as conn:
        user = create_user(conn, email=f"{uuid.uuid4().hex}@example.org", display_name="U")
        routed = tenancy.route(conn, "alpha")
        documents = [DocumentFactory(conn=routed, created_by=user)["id"] for _ in range(2)]
        for document in documents:
            RevisionFactory(
                conn=routed,
                document_id=document,
                uploaded_by=user,
                storage_key=SHARED_KEY,
                sha256="ab" * 32,
            )
    return documents


def test_downgrade_refuses_while_revisions_share_a_key_and_goes_once_they_do_not(
    fleet: Engine,
) -> None:
    migrations.downgrade(fleet, "0004")  # this test is about 0004's own downgrade
    documents = _share_a_key(fleet)
    before = fingerprint(fleet, "tenant_alpha")

    with pytest.raises(MigrationFailed) as refused:
        migrations.downgrade(fleet, "0003")
    kept = revisions(fleet, "tenant_alpha", "tenant_bravo", "dms")
    with fleet.begin() as conn:
        routed = tenancy.route(conn, "alpha")
        routed.execute(sa.delete(t.documents).where(t.documents.c.id == documents[1]))
    migrations.downgrade(fleet, "0003")

    assert "1 storage key(s) are shared by several revisions" in str(refused.value)
    assert SHARED_KEY in str(refused.value)
    # The refused tenant and the shared schema stay where the test put them.
    assert kept == {"tenant_alpha": "0004", "tenant_bravo": "0003", "dms": "0004"}
    assert before.tables  # the refused tenant was left exactly as it was:
    assert revisions(fleet, "tenant_alpha")["tenant_alpha"] == "0003"


def test_upgrade_registers_the_content_addressed_keys_revisions_already_use(
    fleet: Engine,
) -> None:
    with fleet.begin() as conn:
        user = create_user(conn, email=f"{uuid.uuid4().hex}@example.org", display_name="U")
        routed = tenancy.route(conn, "alpha")
        document = DocumentFactory(conn=routed, created_by=user)["id"]
        RevisionFactory(
            conn=routed,
            document_id=document,
            uploaded_by=user,
            storage_key=SHARED_KEY,
            sha256="ab" * 32,
            size_bytes=42,
        )
    migrations.downgrade(fleet, "0003", tenant="alpha")
    migrations.upgrade(fleet, tenant="alpha")

    with fleet.connect() as conn:
        rows = (
            tenancy.route(conn, "alpha")
            .execute(sa.select(t.blobs.c.storage_key, t.blobs.c.size_bytes))
            .all()
        )
    assert [tuple(row) for row in rows] == [(SHARED_KEY, 42)]
