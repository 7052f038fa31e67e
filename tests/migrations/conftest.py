"""Fixtures of the migration tests: each test gets a database of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms.users import create_users_stand_in
from tests.migrations.fingerprint import build_fleet


@pytest.fixture
def db(empty_database_url: URL) -> Iterator[Engine]:
    """An engine on a new, empty database that has only the users stand-in."""
    engine = sa.create_engine(empty_database_url)
    create_users_stand_in(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def fleet(db: Engine) -> Engine:
    """The database at head with the tenants of :data:`TENANTS`, each holding data."""
    build_fleet(db)
    return db
