"""DDL that Core cannot express (functions, triggers), composed with ``psycopg.sql``.

Names are always passed as :class:`psycopg.sql.Identifier`, so they are quoted by the driver.
"""

from __future__ import annotations

from collections.abc import Iterable

from psycopg import sql
from sqlalchemy.engine import Connection

#: A function as a migration writes it: (name, arguments, returns, language, body).
FunctionSource = tuple[str, str, str, str, str]


def execute_ddl(conn: Connection, statement: sql.Composable) -> None:
    """Render ``statement`` with the driver's quoting and run it on ``conn``."""
    driver_conn = conn.connection.driver_connection
    # no_parameters: the text may hold '%' (plpgsql RAISE), which must not be read as a placeholder.
    conn.exec_driver_sql(
        statement.as_string(driver_conn), execution_options={"no_parameters": True}
    )


def create_functions(
    conn: Connection,
    schema: str,
    functions: Iterable[FunctionSource],
    *,
    replace: bool = False,
) -> None:
    """:func:`create_function` for each of ``functions``, in order (``replace``: as there)."""
    for name, arguments, returns, language, body in functions:
        create_function(
            conn,
            schema,
            name,
            arguments=arguments,
            returns=returns,
            language=language,
            body=body,
            replace=replace,
        )


def create_function(
    conn: Connection,
    schema: str,
    name: str,
    *,
    arguments: str,
    returns: str,
    language: str,
    body: str,
    replace: bool = False,
) -> None:
    """Create the function ``schema.name(arguments)``, resolving names in ``schema`` only.

    ``replace`` replaces a function of that name and arguments (``CREATE OR REPLACE``).

    ``arguments``, ``returns`` and ``language`` (with its attributes, such as ``sql STABLE``)
    are SQL written by a migration, never input; the body is passed as a literal. The fixed
    ``search_path`` makes the body's unqualified names mean the tenant's tables wherever the
    function is called from (a trigger of any session, another schema's statement).
    """
    execute_ddl(
        conn,
        sql.SQL(
            "CREATE {}FUNCTION {}.{}({}) RETURNS {} LANGUAGE {} SET search_path = {}, pg_temp AS {}"
        ).format(
            sql.SQL("OR REPLACE " if replace else ""),
            sql.Identifier(schema),
            sql.Identifier(name),
            sql.SQL(arguments),
            sql.SQL(returns),
            sql.SQL(language),
            sql.Identifier(schema),
            sql.Literal(body),
        ),
    )


def create_trigger(
    conn: Connection, schema: str, name: str, *, events: str, table: str, when: str | None = None
) -> None:
    """Create the row trigger ``name`` on ``schema.table``, which runs ``schema.name()``.

    ``events`` (such as ``AFTER UPDATE OF folder_id``) and ``when`` (a condition on ``OLD`` and
    ``NEW``) are SQL written by a migration, never input.
    """
    condition = sql.SQL("") if when is None else sql.SQL(" WHEN ({})").format(sql.SQL(when))
    execute_ddl(
        conn,
        sql.SQL("CREATE TRIGGER {} {} ON {}.{} FOR EACH ROW{} EXECUTE FUNCTION {}.{}()").format(
            sql.Identifier(name),
            sql.SQL(events),
            sql.Identifier(schema),
            sql.Identifier(table),
            condition,
            sql.Identifier(schema),
            sql.Identifier(name),
        ),
    )


def drop_functions(conn: Connection, schema: str, functions: Iterable[FunctionSource]) -> None:
    """Drop each of ``functions`` (as :func:`create_functions` takes them), in the order given."""
    for name, arguments, *_rest in functions:
        drop_function(conn, schema, name, arguments=arguments)


def drop_function(conn: Connection, schema: str, name: str, *, arguments: str) -> None:
    """Drop the function ``schema.name(arguments)`` (``arguments`` as it was created with)."""
    execute_ddl(
        conn,
        sql.SQL("DROP FUNCTION {}.{}({})").format(
            sql.Identifier(schema), sql.Identifier(name), sql.SQL(arguments)
        ),
    )


def drop_trigger(conn: Connection, schema: str, name: str, *, table: str) -> None:
    """Drop the trigger ``name`` of ``schema.table``."""
    execute_ddl(
        conn,
        sql.SQL("DROP TRIGGER {} ON {}.{}").format(
            sql.Identifier(name), sql.Identifier(schema), sql.Identifier(table)
        ),
    )
