"""How many worker processes a fleet operation runs: what the caller asked, or what suits.

Every fleet operation (creating tenants, migrating them, reindexing them) sizes its pool here,
so ``jobs=AUTO_JOBS`` means the same for each.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms.fleet.arguments import AUTO_JOBS, Jobs

#: Below this many tenants, the default is this process alone: starting worker
#: processes (about a second) would cost more than it saves.
PARALLEL_FROM_TENANTS = 32
#: The default number of worker processes is at most this (and at most the CPUs here, and
#: half the connections the server has free).
MAX_DEFAULT_JOBS = 8


def worker_processes(jobs: Jobs, engine: Engine, tenants: int) -> int:
    """The worker processes of a fleet operation over ``tenants`` tenants called with ``jobs``."""
    if jobs == AUTO_JOBS:
        return default_jobs(engine, tenants)
    return 1 if jobs is None else jobs


def default_jobs(engine: Engine, tenants: int) -> int:
    """Worker processes for ``tenants`` tenants when the caller did not say.

    One (this process) for fewer than :data:`PARALLEL_FROM_TENANTS`; otherwise the CPUs of this
    machine, at most :data:`MAX_DEFAULT_JOBS` and at most half the connections the server has
    free: migrations wait on the server's disk more than on its CPUs, but every worker holds a
    connection.
    """
    if tenants < PARALLEL_FROM_TENANTS:
        return 1
    activity = sa.table("pg_stat_activity", sa.column("pid"))
    setting = sa.func.current_setting
    free = sa.select(
        setting("max_connections").cast(sa.Integer)
        - setting("superuser_reserved_connections").cast(sa.Integer)
        - sa.select(sa.func.count()).select_from(activity).scalar_subquery()
    )
    with engine.connect() as conn:
        connections = int(conn.scalar(free) or 0)
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_JOBS, connections // 2))
