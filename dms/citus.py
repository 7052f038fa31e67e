"""Citus: whether the database is a Citus cluster, and the few things dms does differently there.

The same code serves plain PostgreSQL and Citus; what differs is decided here, at run time, from
the catalog of the database a connection is on (:func:`is_citus`: the ``citus`` extension is
installed and ``pg_dist_node`` lists nodes). On Citus:

* each tenant schema is a **distributed schema** (schema-based sharding): every table of the
  tenant lives whole on one node, co-located, so every statement of a tenant's unit of work is
  routed to that node as it is (:func:`distribute_schema`, called when a tenant is created);
* the IAM's ``users`` table is a **reference table**, held by every node, so that each node's
  tenant tables keep their foreign keys to it (:func:`make_reference_table`);
* the shared ``dms`` schema (registry, job queue, idempotency ledger) stays a plain schema on
  the coordinator (:func:`keep_schema_local`), whatever ``citus.enable_schema_based_sharding``
  says: workers LISTEN there and claims are local statements;
* the tenant triggers (gap-free revisions, the acyclic folder tree) are created and carried
  along with ``citus.enable_unsafe_triggers`` on, for that transaction only
  (:func:`allow_tenant_triggers`): see docs/scaling.md for why they are safe in a distributed
  schema, where every table a trigger reads is a co-located shard on the same node.

Where a tenant lives (:func:`schema_nodes`) and moving it (:func:`move_schema`, which Citus
does with ``citus_schema_move``: dms never copies rows itself) are here too. Every statement is
a Core expression over Citus's catalog views and functions; nothing here runs on plain
PostgreSQL except :func:`is_citus`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from dms.errors import ClusterError
from dms.schema.ddl import execute_ddl

#: Where :func:`is_citus` keeps its answer on a DBAPI connection (a connection never changes
#: database, so the answer holds for its lifetime).
_IS_CITUS = "dms.is_citus"

_pg_extension = sa.table("pg_extension", sa.column("extname"), schema="pg_catalog")
_pg_dist_node = sa.table(
    "pg_dist_node",
    sa.column("nodeid", sa.Integer),
    sa.column("groupid", sa.Integer),
    sa.column("nodename", sa.Text),
    sa.column("nodeport", sa.Integer),
    sa.column("noderole", sa.Text),
    sa.column("isactive", sa.Boolean),
    sa.column("shouldhaveshards", sa.Boolean),
    schema="pg_catalog",
)
_pg_namespace = sa.table(
    "pg_namespace", sa.column("oid", sa.Integer), sa.column("nspname", sa.Text), schema="pg_catalog"
)
_pg_dist_schema = sa.table(
    "pg_dist_schema",
    sa.column("schemaid", sa.Integer),
    sa.column("colocationid", sa.Integer),
    schema="pg_catalog",
)
_pg_dist_shard = sa.table(
    "pg_dist_shard",
    sa.column("logicalrelid", sa.Integer),
    sa.column("shardid"),
    schema="pg_catalog",
)
_pg_dist_placement = sa.table(
    "pg_dist_placement",
    sa.column("shardid"),
    sa.column("groupid", sa.Integer),
    schema="pg_catalog",
)
_pg_dist_partition = sa.table(
    "pg_dist_partition",
    sa.column("logicalrelid", sa.Integer),
    sa.column("partmethod", sa.Text),
    sa.column("repmodel", sa.Text),
    sa.column("colocationid", sa.Integer),
    schema="pg_catalog",
)


@dataclass(frozen=True, kw_only=True, order=True)
class Node:
    """A primary node of the cluster: the coordinator (group 0) or a worker."""

    group_id: int
    host: str
    port: int
    holds_shards: bool

    @property
    def name(self) -> str:
        """``host:port``, as operators name a node."""
        return f"{self.host}:{self.port}"

    @property
    def is_coordinator(self) -> bool:
        """Whether this is the coordinator."""
        return self.group_id == 0


def is_citus(conn: Connection) -> bool:
    """Whether ``conn``'s database is a Citus cluster: extension installed and nodes listed."""
    info = conn.connection.info
    if _IS_CITUS not in info:
        info[_IS_CITUS] = _detect(conn)
    return bool(info[_IS_CITUS])


def _detect(conn: Connection) -> bool:
    installed = sa.exists(sa.select(sa.literal(1)).where(_pg_extension.c.extname == "citus"))
    if not conn.scalar(sa.select(installed)):
        return False
    return bool(conn.scalar(sa.select(sa.exists(sa.select(_pg_dist_node.c.nodeid)))))


def nodes(conn: Connection) -> list[Node]:
    """The active primary nodes, coordinator first (empty on plain PostgreSQL)."""
    if not is_citus(conn):
        return []
    rows = conn.execute(
        sa.select(
            _pg_dist_node.c.groupid,
            _pg_dist_node.c.nodename,
            _pg_dist_node.c.nodeport,
            _pg_dist_node.c.shouldhaveshards,
        )
        .where(_pg_dist_node.c.isactive, sa.cast(_pg_dist_node.c.noderole, sa.Text) == "primary")
        .order_by(_pg_dist_node.c.groupid)
    )
    return [
        Node(group_id=group, host=host, port=int(port), holds_shards=bool(shards))
        for group, host, port, shards in rows
    ]


def find_node(conn: Connection, name: str) -> Node:
    """The node named ``host:port``; :class:`ClusterError` if the cluster has none such."""
    known = nodes(conn)
    for node in known:
        if node.name == name:
            return node
    listed = ", ".join(node.name for node in known) or "none"
    raise ClusterError(f"no node {name!r} in the cluster (nodes: {listed})")


def _set_local(conn: Connection, setting: str, value: str) -> None:
    conn.execute(sa.select(sa.func.set_config(setting, value, True)))


def set_local_on_every_node(conn: Connection, settings: Mapping[str, str]) -> bool:
    """On Citus, set ``settings`` for this transaction here and on the workers it uses.

    Returns ``False`` (and does nothing) off Citus. A ``set_config`` of the coordinator stays
    on the coordinator, so a ``lock_timeout`` would not bound the waits on the worker that
    holds a tenant: Citus replays a transaction's ``SET LOCAL`` commands on its worker
    connections only with ``citus.propagate_set_commands = local``, and only ``SET`` commands.
    """
    if not is_citus(conn):
        return False
    _set_local(conn, "citus.propagate_set_commands", "local")
    for setting, value in settings.items():
        statement = sql.SQL("SET LOCAL {} = {}").format(sql.Identifier(setting), sql.Literal(value))
        execute_ddl(conn, statement)
    return True


def allow_tenant_triggers(conn: Connection) -> None:
    """Let this transaction create, distribute and move tables with the tenant triggers."""
    if is_citus(conn):
        _set_local(conn, "citus.enable_unsafe_triggers", "on")


#: The advisory lock that tenant creations on Citus queue for (:func:`queue_for_creation`).
_CREATION_LOCK = "dms.tenant-creation"


def queue_for_creation(conn: Connection) -> None:
    """Wait, without a lock timeout, for the tenant creations in flight (no-op off Citus).

    On Citus a creation's first ``CREATE FUNCTION`` waits for the transaction of another
    creation in flight (seen, not documented by Citus): creations at once are nearly serial
    there anyway, and the one that waits can reach the lock timeout of its transaction (after
    the default 5 s on a loaded machine). Called before the timeout is set, this makes them
    queue for each other instead, whole.
    """
    if is_citus(conn):
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext(_CREATION_LOCK))))


def keep_schema_local(conn: Connection) -> None:
    """Create schemas as plain schemas for the rest of this transaction (the shared schema)."""
    if is_citus(conn):
        _set_local(conn, "citus.enable_schema_based_sharding", "off")


def distribute_schema(conn: Connection, schema: str) -> None:
    """Make ``schema`` a distributed schema, placed whole on one node (no-op off Citus).

    A schema that is already distributed (created while ``citus.enable_schema_based_sharding``
    was on) is left as it is.
    """
    if not is_citus(conn) or schema in _distributed_schemas(conn, [schema]):
        return
    allow_tenant_triggers(conn)
    conn.execute(sa.select(sa.func.citus_schema_distribute(sa.cast(schema, _REGNAMESPACE))))


def _distributed_schemas(conn: Connection, schemas: list[str]) -> set[str]:
    query = (
        sa.select(_pg_namespace.c.nspname)
        .join_from(
            _pg_dist_schema, _pg_namespace, _pg_namespace.c.oid == _pg_dist_schema.c.schemaid
        )
        .where(_pg_namespace.c.nspname.in_(schemas))
    )
    return set(conn.scalars(query))


def make_reference_table(conn: Connection, schema: str, table: str) -> None:
    """Make ``schema.table`` a reference table, held by every node (no-op off Citus)."""
    if not is_citus(conn) or is_reference_table(conn, schema, table):
        return
    conn.execute(sa.select(sa.func.create_reference_table(_regclass(schema, table))))


def is_reference_table(conn: Connection, schema: str, table: str) -> bool:
    """Whether ``schema.table`` is a Citus reference table."""
    query = sa.select(
        sa.exists(
            sa.select(_pg_dist_partition.c.logicalrelid).where(
                _pg_dist_partition.c.logicalrelid == _regclass(schema, table),
                sa.cast(_pg_dist_partition.c.partmethod, sa.Text) == "n",
                sa.cast(_pg_dist_partition.c.repmodel, sa.Text) == "t",
            )
        )
    )
    return bool(conn.scalar(query))


def schema_nodes(conn: Connection) -> dict[str, Node]:
    """The node that holds each distributed schema (empty on plain PostgreSQL).

    Read from Citus's metadata tables (one query), not from ``citus_shards``, which measures
    every shard's size on every node.
    """
    if not is_citus(conn):
        return {}
    by_group = {node.group_id: node for node in nodes(conn)}
    rows = conn.execute(
        sa.select(_pg_namespace.c.nspname, _pg_dist_placement.c.groupid)
        .distinct()
        .join_from(
            _pg_dist_schema, _pg_namespace, _pg_namespace.c.oid == _pg_dist_schema.c.schemaid
        )
        .join(
            _pg_dist_partition,
            _pg_dist_partition.c.colocationid == _pg_dist_schema.c.colocationid,
        )
        .join(_pg_dist_shard, _pg_dist_shard.c.logicalrelid == _pg_dist_partition.c.logicalrelid)
        .join(_pg_dist_placement, _pg_dist_placement.c.shardid == _pg_dist_shard.c.shardid)
    )
    return {schema: by_group[group] for schema, group in rows if group in by_group}


def move_schema(conn: Connection, schema: str, node: Node) -> None:
    """Move distributed schema ``schema`` whole to ``node`` (Citus copies; we never do).

    Writes to the schema wait until the copy is done (``block_writes``); reads go on. Not the
    online mode (logical replication, writes waiting for the switch only): in one CI run under
    load it lost a committed transaction (docs/scaling.md). Must run outside a transaction
    block of the caller's (Citus commits in steps).
    """
    allow_tenant_triggers(conn)
    conn.execute(
        sa.select(
            sa.func.citus_schema_move(
                sa.cast(schema, _REGNAMESPACE),
                node.host,
                node.port,
                sa.cast("block_writes", _TRANSFER_MODE),
            )
        )
    )


def _regclass(schema: str, table: str) -> sa.ColumnElement[str]:
    # The name quoted as PostgreSQL reads it back, so odd schema names still resolve.
    qualified = sa.func.quote_ident(schema).concat(".").concat(sa.func.quote_ident(table))
    return sa.cast(qualified, _REGCLASS)


class _Named(sa.types.UserDefinedType[str]):
    """A PostgreSQL type referred to by name in a cast (``regclass``, ``regnamespace``...)."""

    cache_ok = True

    def __init__(self, name: str) -> None:
        self.name = name

    def get_col_spec(self, **_: object) -> str:
        return self.name


_REGCLASS = _Named("regclass")
_REGNAMESPACE = _Named("regnamespace")
_TRANSFER_MODE = _Named("citus.shard_transfer_mode")


_NESTED = "ALTER ROLE {role} SET citus.allow_nested_distributed_execution = on"

#: Tries at changing the role on Citus, where parallel test processes race to change it.
_ATTEMPTS = 10
#: How long one change waits for a lock before it gives up and tries again.
_LOCK_TIMEOUT = "5s"
#: Whether the role has the setting on the node that runs it: 't' or 'f'.
_PROBE = (
    "SELECT EXISTS (SELECT 1 FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole"
    " WHERE r.rolname = {name} AND {setting} = ANY (s.setconfig))"
)
_SETTING = "citus.allow_nested_distributed_execution=on"


def allow_nested_execution(engine: Engine, name: str) -> None:
    """Give role ``name`` what an application role needs on Citus, on every node.

    For its units of work that name nobody and its raw SQL; Citus does not pass the setting on
    to its workers. Once set, nothing is changed again (a change locks the role). A change is
    made node by node, each in a statement of its own: run in one transaction, the
    coordinator's lock on the role was held while the workers were changed through other
    connections, and parallel test processes doing the same waited on each other across
    nodes, a deadlock that neither Citus nor PostgreSQL sees. Parallel processes still race
    ("tuple concurrently updated", a lock timeout): the loser tries again.
    """
    nested = sql.SQL(_NESTED).format(role=sql.Identifier(name))
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
                if _nodes_without_setting(conn, name) == 0:
                    return
                text = nested.as_string(conn.connection.driver_connection)
                execute_ddl(
                    conn, sql.SQL("SET lock_timeout = {}").format(sql.Literal(_LOCK_TIMEOUT))
                )
                execute_ddl(
                    conn, sql.SQL("SELECT run_command_on_workers({})").format(sql.Literal(text))
                )
                execute_ddl(conn, nested)
        except DBAPIError:
            if attempt == _ATTEMPTS:
                raise
            time.sleep(0.1 * attempt)
    raise RuntimeError(f"could not set {_SETTING} for {name} on every node")


def _nodes_without_setting(conn: sa.Connection, name: str) -> int:
    """How many nodes, the coordinator included, do not give role ``name`` the setting yet."""
    probe = sql.SQL(_PROBE).format(name=sql.Literal(name), setting=sql.Literal(_SETTING))
    text = probe.as_string(conn.connection.driver_connection)
    here = bool(conn.exec_driver_sql(text).scalar_one())
    workers = conn.exec_driver_sql(
        sql.SQL("SELECT result FROM run_command_on_workers({})")
        .format(sql.Literal(text))
        .as_string(conn.connection.driver_connection)
    ).scalars()
    return int(not here) + sum(str(result) != "t" for result in workers)
