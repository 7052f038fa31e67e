"""Throw-away databases: one per test run, test worker or test, dropped afterwards.

On a Citus cluster (the server's maintenance database has the ``citus`` extension and nodes) a
new database is a new Citus cluster of the same nodes: Citus keeps its metadata per database,
so the database is created on every node (``citus.enable_create_database_propagation``), the
extension is created in it on every node, and the coordinator and the workers are registered
in it. Dropping it drops it on every node. About 1.5 s more per database.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import OperationalError, ProgrammingError

from dms.db import normalize_url
from dms.driver_errors import INVALID_CATALOG_NAME, OBJECT_IN_USE, sqlstate_of
from dms.schema.ddl import execute_ddl

#: How long a drop on Citus waits for the workers' sessions in the database to end, polling.
_DROP_WAIT_SECONDS = 30.0
_DROP_RETRY_SECONDS = 0.2
#: The advisory lock that lets one process at a time register a new database's nodes.
_CLUSTER_SETUP_LOCK = 0x646D73_C1_05  # "dms", Citus setup


@dataclass(frozen=True)
class _Node:
    host: str
    port: int
    coordinator: bool


@contextmanager
def temporary_database(server_url: str | URL, *, prefix: str = "dms_test") -> Iterator[URL]:
    """Create an empty database on the server of ``server_url``; drop it (forcefully) after."""
    base = normalize_url(server_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            nodes = _citus_nodes(conn)
            _propagate_to_nodes(conn, nodes)
            execute_ddl(conn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = base.set(database=name)
        if nodes:
            with admin.connect() as conn:
                _make_citus_cluster_alone(conn, url, nodes)
        yield url
    finally:
        _drop(admin, name, nodes)
        admin.dispose()


def _drop(admin: sa.Engine, name: str, nodes: Sequence[_Node]) -> None:
    """Drop database ``name`` everywhere, once no worker has a session in it any more.

    On Citus the coordinator's sessions go at once (FORCE), but the connections they held to
    the workers end a moment later (and the coordinator's own background work may still hold
    one), and a worker refuses to drop a database in use: wait for them, and try again while a
    worker still refuses. Citus drops the workers' copies one by one, so a later try may find
    some gone: then each copy left is dropped on its own node.
    """
    statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    deadline = time.monotonic() + _DROP_WAIT_SECONDS
    while True:
        for node in nodes:
            if not node.coordinator:
                _wait_until_unused(_node_url(admin, node), name)
        try:
            with admin.connect() as conn:
                _propagate_to_nodes(conn, nodes)
                execute_ddl(conn, statement)
        except OperationalError as exc:
            if sqlstate_of(exc) != OBJECT_IN_USE or not nodes:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(_DROP_RETRY_SECONDS)
        except ProgrammingError as exc:
            if sqlstate_of(exc) != INVALID_CATALOG_NAME or not nodes:
                raise
            _drop_each_copy(admin, name, nodes, statement)
            return
        else:
            return


def _node_url(admin: sa.Engine, node: _Node) -> URL:
    return admin.url.set(host=node.host, port=node.port)


def _drop_each_copy(
    admin: sa.Engine, name: str, nodes: Sequence[_Node], statement: sql.Composable
) -> None:
    """Drop what is left of ``name`` node by node (workers first), without propagation."""
    for node in sorted(nodes, key=lambda n: n.coordinator):
        _wait_until_unused(_node_url(admin, node), name)
        engine = sa.create_engine(
            _node_url(admin, node), isolation_level="AUTOCOMMIT", poolclass=sa.NullPool
        )
        try:
            with engine.connect() as conn:
                execute_ddl(conn, statement)
        finally:
            engine.dispose()


_activity = sa.table(
    "pg_stat_activity",
    sa.column("pid"),
    sa.column("datname"),
    sa.column("backend_type"),
    schema="pg_catalog",
)


def _wait_until_unused(node_url: URL, name: str) -> None:
    """End the sessions in ``name`` on the node of ``node_url`` and wait until they are gone."""
    engine = sa.create_engine(node_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    # Client sessions only: Citus stops its own background worker there as the drop runs.
    in_use = sa.and_(
        _activity.c.datname == name,
        _activity.c.pid != sa.func.pg_backend_pid(),
        _activity.c.backend_type == "client backend",
    )
    sessions = sa.select(_activity.c.pid).where(in_use)
    terminate = sa.select(sa.func.pg_terminate_backend(_activity.c.pid)).where(in_use)
    deadline = time.monotonic() + _DROP_WAIT_SECONDS
    try:
        with engine.connect() as conn:
            while conn.execute(sessions).first() is not None and time.monotonic() < deadline:
                conn.execute(terminate)
                time.sleep(_DROP_RETRY_SECONDS)
    finally:
        engine.dispose()


def _citus_nodes(conn: Connection) -> list[_Node]:
    """The active primary nodes of the Citus cluster ``conn`` is on; none without Citus."""
    if conn.scalar(sa.select(sa.func.to_regclass("pg_catalog.pg_dist_node"))) is None:
        return []
    nodes = sa.table(
        "pg_dist_node",
        sa.column("nodename"),
        sa.column("nodeport"),
        sa.column("groupid"),
        sa.column("noderole"),
        sa.column("isactive"),
        schema="pg_catalog",
    )
    rows = conn.execute(
        sa.select(nodes.c.nodename, nodes.c.nodeport, nodes.c.groupid)
        .where(nodes.c.isactive, sa.cast(nodes.c.noderole, sa.Text) == "primary")
        .order_by(nodes.c.groupid)
    )
    return [_Node(host=host, port=int(port), coordinator=group == 0) for host, port, group in rows]


def _propagate_to_nodes(conn: Connection, nodes: Sequence[_Node]) -> None:
    if nodes:
        conn.execute(
            sa.select(sa.func.set_config("citus.enable_create_database_propagation", "on", False))
        )


def _make_citus_cluster_alone(admin: Connection, url: URL, nodes: Sequence[_Node]) -> None:
    """:func:`_make_citus_cluster`, one process at a time.

    Registering a node makes Citus create or alter the current role on that node, a row of the
    node's ``pg_authid`` shared by all its databases: two registrations at once failed with
    "tuple concurrently updated" there ("failure on connection marked as essential" here).
    The lock is taken in the maintenance database that every caller connects to first (an
    advisory lock belongs to one database).
    """
    admin.execute(sa.select(sa.func.pg_advisory_lock(_CLUSTER_SETUP_LOCK)))
    try:
        _make_citus_cluster(url, nodes)
    finally:
        admin.execute(sa.select(sa.func.pg_advisory_unlock(_CLUSTER_SETUP_LOCK)))


def _make_citus_cluster(url: URL, nodes: Sequence[_Node]) -> None:
    """Create the extension on every node of the new database, and register the nodes in it."""
    for node in nodes:
        engine = sa.create_engine(
            url.set(host=node.host, port=node.port),
            isolation_level="AUTOCOMMIT",
            poolclass=sa.NullPool,
        )
        with engine.connect() as conn:
            execute_ddl(conn, sql.SQL("CREATE EXTENSION IF NOT EXISTS citus"))
        engine.dispose()
    coordinator = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with coordinator.connect() as conn:
        for node in nodes:
            register = (
                sa.func.citus_set_coordinator_host if node.coordinator else sa.func.citus_add_node
            )
            conn.execute(sa.select(register(node.host, node.port)))
    coordinator.dispose()
