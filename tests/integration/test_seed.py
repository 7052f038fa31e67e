"""The seed, end to end, against a fresh database, twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from dms import jobs, migrations, tenancy
from dms.domain import FieldType
from dms.processing import VERIFY_REVISION
from dms.schema import tenant as t
from dms.seed import DOCUMENTS_PER_TENANT, SEED_TENANTS, seed
from dms.storage import LocalBlobStore
from dms.users import create_users_stand_in


def _counts(engine: sa.Engine, slug: str) -> dict[str, int]:
    with engine.connect() as conn:
        routed = tenancy.route(conn, slug)
        return {
            table.name: routed.scalar(sa.select(sa.func.count()).select_from(table)) or 0
            for table in t.metadata.sorted_tables
            if table is not t.users
        }


@pytest.mark.slow
def test_seed_twice_fills_once(empty_database_url: URL, tmp_path: Path) -> None:
    engine = sa.create_engine(empty_database_url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)

    first = seed(engine, blobs=LocalBlobStore(tmp_path))
    after_first = {slug: _counts(engine, slug) for slug in SEED_TENANTS}
    second = seed(engine, blobs=LocalBlobStore(tmp_path))
    after_second = {slug: _counts(engine, slug) for slug in SEED_TENANTS}
    slugs = [tenant.slug for tenant in tenancy.list_tenants(engine)]
    with engine.connect() as conn:
        queued = jobs.stats(conn, kind=VERIFY_REVISION).total()
    engine.dispose()

    assert slugs == sorted(SEED_TENANTS)
    assert after_first == after_second
    assert all(counts == {} for counts in second.inserted.values())
    assert queued == sum(after_first[slug]["file_revisions"] for slug in SEED_TENANTS)
    for slug in SEED_TENANTS:
        counts = after_first[slug]
        assert first.inserted[slug]["documents"] == DOCUMENTS_PER_TENANT
        assert counts["documents"] == DOCUMENTS_PER_TENANT
        assert DOCUMENTS_PER_TENANT <= counts["file_revisions"] <= 3 * DOCUMENTS_PER_TENANT
        # one field of every type, plus the two that revision verification writes
        assert counts["metadata_fields"] == len(FieldType) + 2
        assert counts["document_metadata_choices"] > 0
        assert counts["document_tags"] > 0


@pytest.mark.slow
def test_seed_covers_every_field_type_and_three_folder_levels(
    empty_database_url: URL, tmp_path: Path
) -> None:
    engine = sa.create_engine(empty_database_url)
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    seed(engine, blobs=LocalBlobStore(tmp_path))
    with engine.connect() as conn:
        routed = tenancy.route(conn, SEED_TENANTS[0])
        types = set(routed.scalars(sa.select(t.metadata_fields.c.field_type)))
        leaf = t.folders.alias("leaf")
        mid = t.folders.alias("mid")
        deepest = routed.scalar(
            sa.select(sa.func.count())
            .select_from(leaf)
            .join(mid, leaf.c.parent_id == mid.c.id)
            .where(mid.c.parent_id.is_not(None))
        )
        without_current = routed.scalar(
            sa.select(sa.func.count())
            .select_from(t.documents)
            .where(t.documents.c.current_revision_id.is_(None))
        )
    engine.dispose()
    assert types == {kind.value for kind in FieldType}
    assert (deepest or 0) > 0
    assert without_current == 0
