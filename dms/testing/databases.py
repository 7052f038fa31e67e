"""Throw-away databases: one per test run, test worker or test, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL

from dms.db import normalize_url
from dms.schema.ddl import execute_ddl


@contextmanager
def temporary_database(server_url: str | URL, *, prefix: str = "dms_test") -> Iterator[URL]:
    """Create an empty database on the server of ``server_url``; drop it (forcefully) after."""
    base = normalize_url(server_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            execute_ddl(conn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield base.set(database=name)
    finally:
        with admin.connect() as conn:
            execute_ddl(
                conn,
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
            )
        admin.dispose()
