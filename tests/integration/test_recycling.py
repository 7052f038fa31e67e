"""The tests' recycled tenants (tests/recycling.py): handed out as new, or not at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, Connection, Engine

from dms import tenancy
from dms.domain import DocumentQuery
from dms.schema import tenant as t
from dms.schema.ddl import execute_ddl
from dms.uow import UnitOfWork
from tests.conftest import new_user
from tests.recycling import Recycler


@pytest.fixture
def own_engine(database_url: URL) -> Iterator[Engine]:
    """An engine of its own: the recycler watches the statements of the engine it is given."""
    engine = sa.create_engine(database_url)
    yield engine
    engine.dispose()


def _add_column(conn: Connection, slug: str) -> None:
    """A schema change of the tenant ``slug``: a column more on its tags."""
    tags = sql.Identifier(tenancy.schema_name(slug), "tags")
    execute_ddl(conn, sql.SQL("ALTER TABLE {} ADD COLUMN spare integer").format(tags))


def _rows(engine: Engine, slug: str, table: sa.Table) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in tenancy.route(conn, slug).execute(sa.select(table))]


def test_a_tenant_comes_back_empty_with_what_its_creation_wrote(own_engine: Engine) -> None:
    recycler = Recycler(own_engine)
    user = new_user(own_engine)
    with recycler.tenant() as first:
        seeded = {
            table: _rows(own_engine, first, table) for table in (t.access_entries, t.audit_chain)
        }
        with UnitOfWork(own_engine, tenant=first, user_id=user) as uow:
            uow.documents.add(title="left behind.pdf")
            uow.commit()
    with recycler.tenant() as second:
        with UnitOfWork(own_engine, tenant=second, user_id=user) as uow:
            left = uow.documents.search(DocumentQuery()).items
        now = {table: _rows(own_engine, second, table) for table in seeded}
    assert second == first
    assert left == []
    assert now == seeded
    assert _rows(own_engine, second, t.audit_events) == []


def test_a_tenant_named_in_ddl_during_its_test_is_not_handed_out_again(
    own_engine: Engine,
) -> None:
    recycler = Recycler(own_engine)
    # Rolled back: it counts all the same.
    with recycler.tenant() as first, own_engine.connect() as conn, conn.begin():
        _add_column(conn, first)
        conn.rollback()
    with recycler.tenant() as second:
        pass
    assert second != first
    assert first not in {tenant.slug for tenant in tenancy.list_tenants(own_engine)}


def test_a_tenant_whose_catalog_changed_while_idle_is_replaced(
    own_engine: Engine, engine: Engine
) -> None:
    recycler = Recycler(own_engine)
    with recycler.tenant() as first:
        pass
    with engine.begin() as conn:  # an engine the recycler does not watch
        _add_column(conn, first)
    with recycler.tenant() as second:
        pass
    assert second != first
