"""DDL that Core cannot express (functions, triggers), composed with ``psycopg.sql``.

Names are always passed as :class:`psycopg.sql.Identifier`, so they are quoted by the driver.
"""

from __future__ import annotations

from psycopg import sql
from sqlalchemy.engine import Connection


def execute_ddl(conn: Connection, statement: sql.Composable) -> None:
    """Render ``statement`` with the driver's quoting and run it on ``conn``."""
    driver_conn = conn.connection.driver_connection
    # no_parameters: the text may hold '%' (plpgsql RAISE), which must not be read as a placeholder.
    conn.exec_driver_sql(
        statement.as_string(driver_conn), execution_options={"no_parameters": True}
    )
