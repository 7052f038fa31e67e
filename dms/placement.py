"""Where tenants live on a Citus cluster, and moving one to another node.

On Citus every tenant schema is a distributed schema placed whole on one node
(:mod:`dms.citus`). :func:`tenant_nodes` says which node holds each tenant (one catalog query
for the whole fleet); :func:`move_tenant` moves one with ``citus_schema_move``: Citus copies
the shards, switches the placement and drops the old copy; dms never copies rows itself. Work
on the tenant may go on meanwhile: its writes wait for the end of the copy, its reads go on.
Jobs, the registry and every other tenant are not touched.

On plain PostgreSQL there is one server: :func:`tenant_nodes` is empty and :func:`move_tenant`
raises :class:`~dms.errors.ClusterError`.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import citus, tenancy
from dms.citus import Node
from dms.domain.validation import check_text
from dms.errors import ClusterError


def tenant_nodes(engine: Engine) -> dict[str, Node]:
    """The node that holds each registered tenant (empty on plain PostgreSQL)."""
    with engine.connect() as conn:
        by_schema = citus.schema_nodes(conn)
        slugs = [tenant.slug for tenant in tenancy.list_tenants(conn)] if by_schema else []
    return {
        slug: by_schema[tenancy.schema_name(slug)]
        for slug in slugs
        if tenancy.schema_name(slug) in by_schema
    }


def move_tenant(engine: Engine, slug: str, to: str) -> Node:
    """Move tenant ``slug`` to node ``to`` (``host:port``); return the node it was on.

    Raises :class:`~dms.errors.InvalidTenantName` or, for a ``to`` that is not text,
    :class:`~dms.errors.ValidationError` before any SQL,
    :class:`~dms.errors.TenantNotFound` if it is not registered, and
    :class:`~dms.errors.ClusterError` off Citus, for an unknown node, or for a node that
    holds no tenants (the coordinator, unless it was added to hold shards), and when Citus
    fails the move (a node down, a table in the way on the target), naming the node the
    tenant is on afterwards (Citus rolls a failed move back). Moving a tenant to the node it
    is on does nothing.
    """
    schema = tenancy.schema_name(slug)
    check_text("node", to)
    with engine.connect() as conn:
        if not citus.is_citus(conn):
            raise ClusterError("not a Citus cluster: every tenant lives on the one server")
        tenancy.get_tenant(conn, slug)
        target = citus.find_node(conn, to)
        if not target.holds_shards:
            raise ClusterError(f"node {target.name} does not hold tenants (shouldhaveshards)")
        source = citus.schema_nodes(conn).get(schema)
        if source is None:
            raise ClusterError(f"tenant {slug!r} is not a distributed schema")
        conn.rollback()
    if source != target:
        # Outside any transaction of ours: Citus commits the move in steps of its own.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            try:
                citus.move_schema(conn, schema, target)
            except sa.exc.DBAPIError as exc:
                # Citus rolls a failed move back, but a lost connection leaves us not knowing
                # how far it got: say where the tenant is, as the cluster says now.
                lines = str(exc.orig).strip().splitlines()
                reason = lines[0] if lines else type(exc.orig).__name__
                raise ClusterError(
                    f"moving tenant {slug!r} to {target.name} failed, it is on "
                    f"{_where(engine, schema)}: {reason}"
                ) from exc
    return source


def _where(engine: Engine, schema: str) -> str:
    with engine.connect() as conn:
        node = citus.schema_nodes(conn).get(schema)
    return node.name if node else "no node"
