"""Whether a dms database is in shape: migrated, reachable, its job queue healthy.

Reads PostgreSQL's catalogs and statistics views (``pg_class``, ``pg_stat_user_tables``,
``pg_stat_activity``): figures about the database that no table of ``dms`` holds.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms.config import SHARED_SCHEMA
from dms.errors import NotMigrated

#: Tables of the shared schema without which nothing of dms works.
_SHARED_TABLES = ("tenants", "processing_jobs")


def require_migrated(conn: Connection) -> None:
    """Raise :class:`~dms.errors.NotMigrated` unless the shared schema's tables exist."""
    found = conn.execute(
        sa.select(*(sa.func.to_regclass(f"{SHARED_SCHEMA}.{name}") for name in _SHARED_TABLES))
    ).one()
    if any(table is None for table in found):
        raise NotMigrated()
