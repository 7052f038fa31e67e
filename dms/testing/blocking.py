"""Whether one backend waits for a lock that another holds, on plain PostgreSQL and on Citus.

For tests that prove two transactions were serialised. On one server that is
``pg_blocking_pids``. On a Citus cluster the lock a tenant's statement waits for is taken on
the worker that holds the tenant, where the coordinator's ``pg_blocking_pids`` does not look;
Citus's ``citus_lock_waits`` lists every wait of the cluster by global process id (node id and
pid of the coordinator backend that started the distributed transaction).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from dms import citus

_citus_lock_waits = sa.table(
    "citus_lock_waits",
    sa.column("waiting_gpid", sa.BigInteger),
    sa.column("blocking_gpid", sa.BigInteger),
    schema="pg_catalog",
)


def is_blocked_by(conn: Connection, waiter_pid: int, holder_pid: int) -> bool:
    """Whether backend ``waiter_pid`` waits for a lock of ``holder_pid`` (on ``conn``'s server).

    Reads in a transaction of its own that it ends, so that repeated calls see new waits.
    """
    if citus.is_citus(conn):
        query = _citus_query(waiter_pid, holder_pid)
    else:
        position = sa.func.array_position(sa.func.pg_blocking_pids(waiter_pid), holder_pid)
        query = sa.select(position.is_not(None))
    blocked = conn.scalar(query)
    conn.rollback()
    return bool(blocked)


def _citus_query(waiter_pid: int, holder_pid: int) -> sa.Select[tuple[bool]]:
    node = sa.func.citus_nodeid_for_gpid(sa.func.citus_backend_gpid())
    waits = sa.select(_citus_lock_waits.c.waiting_gpid).where(
        _citus_lock_waits.c.waiting_gpid == sa.func.citus_calculate_gpid(node, waiter_pid),
        _citus_lock_waits.c.blocking_gpid == sa.func.citus_calculate_gpid(node, holder_pid),
    )
    return sa.select(sa.exists(waits))


_pg_stat_activity = sa.table(
    "pg_stat_activity",
    sa.column("datname"),
    sa.column("wait_event_type"),
    sa.column("wait_event"),
    schema="pg_catalog",
)


def row_lock_waits(conn: Connection) -> int:
    """How many sessions of ``conn``'s database wait for another transaction right now.

    On Citus: every lock wait of the cluster's distributed transactions (on any node).
    """
    if citus.is_citus(conn):
        query = sa.select(sa.func.count()).select_from(_citus_lock_waits)
    else:
        query = sa.select(sa.func.count()).where(
            _pg_stat_activity.c.datname == sa.func.current_database(),
            _pg_stat_activity.c.wait_event_type == "Lock",
            _pg_stat_activity.c.wait_event == "transactionid",
        )
    waits = int(conn.scalar(query) or 0)
    conn.rollback()
    return waits
