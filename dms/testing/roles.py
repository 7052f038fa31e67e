"""An engine that acts as an ordinary application role, for tests and benchmarks of access control.

Row-level security never applies to a superuser or a role with ``BYPASSRLS`` (docs/access.md),
and test servers are usually reached as a superuser. :func:`application_engine` makes a role
without either (once per server: roles belong to the server, and parallel processes race to
create it), grants it the tenants' tables, and returns an engine that logs in as that role
(trust authentication, as on test servers): no session state, so it works behind PgBouncer in
transaction mode and on Citus, whose coordinator connects to its nodes as the same role.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from dms import citus, tenancy
from dms.schema.ddl import execute_ddl

#: The role :func:`application_engine` acts as.
APPLICATION_ROLE = "dms_test_app"

_CREATE = """
DO $$ BEGIN
    CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$
"""


_NESTED = "ALTER ROLE {role} SET citus.allow_nested_distributed_execution = on"


def application_engine(engine: Engine, tenants: Iterable[str], **options: Any) -> Engine:
    """An engine on ``engine``'s database whose sessions act as :data:`APPLICATION_ROLE`.

    ``engine`` must be able to create roles and grant on the tenants' schemas. The role gets
    the use of each tenant's schema and the reading and writing of its tables. ``options`` go
    to :func:`sqlalchemy.create_engine`; without a ``poolclass`` there is no pool (a test's
    connections end with it), and a benchmark passes a pool so that its timings, like the
    superuser's, are of warm sessions. Dispose of the returned engine when done.
    """
    role = sql.Identifier(APPLICATION_ROLE)
    with engine.begin() as conn:
        execute_ddl(conn, sql.SQL(_CREATE).format(role=role))
        on_citus = citus.is_citus(conn)
    if on_citus:
        _allow_nested_execution(engine, APPLICATION_ROLE)
    with engine.begin() as conn:
        for tenant in tenants:
            schema = sql.Identifier(tenancy.schema_name(tenant))
            execute_ddl(conn, sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
            execute_ddl(
                conn,
                sql.SQL(
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}"
                ).format(schema, role),
            )
    url = engine.url.set(username=APPLICATION_ROLE)
    return sa.create_engine(url, **{"poolclass": sa.NullPool, **options})


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


def _allow_nested_execution(engine: Engine, name: str) -> None:
    """Give the role what docs/access.md asks of an application role on Citus, on every node.

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
