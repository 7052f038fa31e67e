"""An engine that acts as an ordinary application role, for tests and benchmarks of access control.

Row-level security never applies to a superuser or a role with ``BYPASSRLS`` (docs/access.md),
and test servers are usually reached as a superuser. :func:`application_engine` makes a role
without either (once per server: roles belong to the server, and parallel processes race to
create it), grants it the tenants' tables, and returns an engine that logs in as that role
(trust authentication, as on test servers): no session state, so it works behind PgBouncer in
transaction mode and on Citus, whose coordinator connects to its nodes as the same role.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.schema.ddl import execute_ddl

#: The role :func:`application_engine` acts as.
APPLICATION_ROLE = "dms_test_app"

_CREATE = """
DO $$ BEGIN
    CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$
"""


def application_engine(engine: Engine, tenants: Iterable[str], *, pooled: bool = False) -> Engine:
    """An engine on ``engine``'s database whose sessions act as :data:`APPLICATION_ROLE`.

    ``engine`` must be able to create roles and grant on the tenants' schemas. The role gets
    the use of each tenant's schema and the reading and writing of its tables. Dispose of the
    returned engine when done.

    ``pooled``: keep connections between units of work, for a test that opens hundreds of them
    (each new session starts a server process and compiles the access functions and triggers
    again, tens of milliseconds on a busy machine). Without it nothing stays open.
    """
    role = sql.Identifier(APPLICATION_ROLE)
    with engine.begin() as conn:
        execute_ddl(conn, sql.SQL(_CREATE).format(role=role))
        for tenant in tenants:
            schema = sql.Identifier(tenancy.schema_name(tenant))
            execute_ddl(conn, sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
            execute_ddl(
                conn,
                sql.SQL(
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}"
                ).format(schema, role),
            )
    return sa.create_engine(
        engine.url.set(username=APPLICATION_ROLE),
        poolclass=sa.QueuePool if pooled else sa.NullPool,
    )
