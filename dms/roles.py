"""The application's role: created or adopted, granted exactly what it needs, and checked.

Two roles, each with one job (docs/operations.md, "Roles: who owns what"):

* the **owner** runs DDL: migrations and tenant creation. It owns the shared schema, every
  tenant schema and everything in them.
* the **application** reads and writes rows: the application's engine, its workers and the
  ``dms`` commands an operator runs day to day. Never a superuser, never ``BYPASSRLS``, owning
  nothing: PostgreSQL exempts superusers and ``BYPASSRLS`` roles from every policy, and an
  owner from its tables' privileges.

:func:`setup` creates the application role (or adopts an existing one, once it is none of
those), records it in ``dms.application_roles`` and grants it, on the shared schema and on
every tenant, exactly the privileges of :func:`expected_table_privileges`. :func:`grant_tenants`
grants tenant schemas to every recorded role in the caller's transaction: tenant creation and
every tenant migration call it, so a new tenant, and a table a revision adds, are granted in
the transaction that makes them. :func:`problems` lists each privilege missing or in excess,
by schema, table and role (``dms check``); :func:`acting_role_warning` says when a connection
acts as a role the policies do not hold.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine

from dms import citus
from dms.config import SHARED_SCHEMA, settings_of
from dms.errors import ConfigurationError, ValidationError
from dms.migrations.catalog import PG_CLASS, PG_NAMESPACE, PG_ROLES
from dms.migrations.scripts import VERSION_TABLE
from dms.migrations.status import registered_schemas
from dms.schema.ddl import execute_ddl
from dms.schema.shared import application_roles

log = logging.getLogger(__name__)

#: What the application does with the rows of a table it writes.
WRITE = ("SELECT", "INSERT", "UPDATE", "DELETE")
#: What it does with the rows of a table it only reads.
READ = ("SELECT",)
#: Every table privilege PostgreSQL knows: what is not expected is in excess.
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
#: Shared tables the application only reads: the registry (tenants are created by the owner),
#: the roles and the revision.
_SHARED_READ_ONLY = ("tenants", application_roles.name, VERSION_TABLE)
#: Tenant tables the application may not write whole: the version table is read; a user is
#: enlisted in ``known_users`` (by the triggers, in the writing transaction) and never taken out
#: by the application: a deleted row would take that user's entries and memberships with it.
_TENANT_NARROWED = {VERSION_TABLE: READ, "known_users": ("SELECT", "INSERT")}
#: Schemas granted per statement (``GRANT ... ON ALL TABLES IN SCHEMA a, b, ...``).
SCHEMAS_PER_GRANT = 200
#: A role name: what PostgreSQL takes unquoted, lower case (as ``dms roles setup`` documents).
_MAX_ROLE_NAME = 63


class RoleRefused(ConfigurationError):
    """The role cannot be the application's: a superuser, ``BYPASSRLS``, or an owner."""


@dataclass(frozen=True, kw_only=True)
class PrivilegeProblem:
    """A privilege the application role lacks (``missing``) or holds beyond its need."""

    role: str
    schema: str
    """The schema, or the database's name (:attr:`database`)."""
    table: str | None  # None: the schema (or the database) itself
    privilege: str
    missing: bool
    database: bool = False

    def __str__(self) -> str:
        """One line: ``role app lacks SELECT on dms.tenants``."""
        target = self.schema if self.table is None else f"{self.schema}.{self.table}"
        if self.database:
            target = f"database {self.schema}"
        held = "lacks" if self.missing else "holds, beyond its need,"
        return f"role {self.role} {held} {self.privilege} on {target}"


def expected_table_privileges(schema: str, table: str) -> tuple[str, ...]:
    """What the application role holds on ``schema.table``: rows read and written, or read."""
    if schema == SHARED_SCHEMA:
        return READ if table in _SHARED_READ_ONLY else WRITE
    return _TENANT_NARROWED.get(table, WRITE)


def check_role_name(role: object) -> str:
    """``role`` if it names a role plainly (lower case, as PostgreSQL folds it), else raise."""
    if (
        not isinstance(role, str)
        or not role
        or len(role) > _MAX_ROLE_NAME
        or not (role[0].isalpha() or role[0] == "_")
        or not all(c.isascii() and (c.isalnum() or c == "_") for c in role)
        or role != role.lower()
        or role.startswith("pg_")
    ):
        raise ValidationError(
            f"role {role!r}: a role name is 1 to 63 lower-case letters, digits and '_', "
            "starting with a letter or '_', not 'pg_'"
        )
    return role


def setup(engine: Engine, role: str) -> int:
    """Make ``role`` the application's role, on the shared schema and every tenant.

    Creates it (``LOGIN``, no password: authentication is the server's configuration) or
    adopts it, records it, takes back whatever it held on dms's schemas and grants exactly
    what :func:`expected_table_privileges` says, a few hundred tenants per transaction.
    Idempotent.
    Returns the number of tenant schemas granted. Raises :class:`ValidationError` for a name
    that is no plain role name and :class:`RoleRefused` for a superuser, a ``BYPASSRLS``
    role, the connecting role itself, or a role that owns a dms schema.
    """
    check_role_name(role)
    with engine.begin() as conn:
        _create_or_adopt(conn, role)
        conn.execute(
            postgresql.insert(application_roles).values(role_name=role).on_conflict_do_nothing()
        )
        _revoke_all(conn, [SHARED_SCHEMA], role)
        _grant_shared(conn, role)
        schemas = sorted(registered_schemas(conn))
        on_citus = citus.is_citus(conn)
        _no_objects_of_its_own(conn, role, on_citus=on_citus)
    for start in range(0, len(schemas), SCHEMAS_PER_GRANT):
        with engine.begin() as conn:
            chunk = schemas[start : start + SCHEMAS_PER_GRANT]
            _revoke_all(conn, chunk, role)
            _grant(conn, chunk, [role])
    if on_citus:
        citus.allow_nested_execution(engine, role)
    return len(schemas)


def _no_objects_of_its_own(conn: Connection, role: str, *, on_citus: bool) -> None:
    """Take back ``TEMPORARY`` and ``CREATE`` on the database, on every node.

    From ``PUBLIC`` too: ``TEMPORARY`` is PostgreSQL's default for every role. A role that can
    create no object can create no trigger: every trigger that runs on a tenant's tables is
    then one of dms's own, which is what the policies' trust in a trigger's depth rests on
    (docs/security.md). dms itself never makes temporary tables.
    """
    database = conn.execute(sa.select(sa.func.current_database())).scalar_one()
    statement = sql.SQL(
        "REVOKE TEMPORARY, CREATE ON DATABASE {database} FROM PUBLIC, {role}"
    ).format(database=sql.Identifier(database), role=sql.Identifier(role))
    execute_ddl(conn, statement)
    if on_citus:
        text = statement.as_string(conn.connection.driver_connection)
        conn.execute(sa.select(sa.func.run_command_on_workers(text)))


def _create_or_adopt(conn: Connection, role: str) -> None:
    found = conn.execute(
        sa.select(PG_ROLES.c.rolsuper, PG_ROLES.c.rolbypassrls).where(PG_ROLES.c.rolname == role)
    ).one_or_none()
    if found is None:
        execute_ddl(
            conn,
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE").format(
                sql.Identifier(role)
            ),
        )
        return
    if found.rolsuper or found.rolbypassrls:
        kind = "a superuser" if found.rolsuper else "a BYPASSRLS role"
        raise RoleRefused(
            f"role {role} is {kind}: PostgreSQL exempts it from row-level security, so it "
            "cannot be the application's role"
        )
    if role == conn.execute(sa.select(sa.func.current_user())).scalar_one():
        raise RoleRefused(f"role {role} is the one migrating: the application needs its own")
    owned = _owned_schemas(conn, role)
    if owned:
        raise RoleRefused(
            f"role {role} owns {', '.join(owned[:3])}: an owner is exempt from its tables' "
            "privileges; the application needs a role that owns nothing of dms"
        )


def _owned_schemas(conn: Connection, role: str) -> list[str]:
    owner = sa.func.pg_get_userbyid(PG_NAMESPACE.c.nspowner)
    dms_schemas = sa.or_(
        PG_NAMESPACE.c.nspname == SHARED_SCHEMA, PG_NAMESPACE.c.nspname.like("tenant\\_%")
    )
    query = sa.select(PG_NAMESPACE.c.nspname).where(owner == role, dms_schemas).limit(3)
    return [str(name) for name in conn.execute(query).scalars()]


def _revoke_all(conn: Connection, schemas: Sequence[str], role: str) -> None:
    """Take back whatever ``role`` was granted on ``schemas`` and their tables.

    :func:`setup` then grants exactly what is needed, whatever was there before.
    """
    names = sql.SQL(", ").join(sql.Identifier(schema) for schema in schemas)
    who = sql.Identifier(role)
    execute_ddl(conn, sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(names, who))
    execute_ddl(conn, sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(names, who))


def grant_shared(conn: Connection) -> None:
    """Grant the shared schema to every recorded application role.

    In ``conn``'s transaction: what a migration of the shared schema needs, once its tables
    exist.
    """
    for role in recorded_roles(conn):
        _grant_shared(conn, role)


def _grant_shared(conn: Connection, role: str) -> None:
    who = sql.Identifier(role)
    shared = sql.Identifier(SHARED_SCHEMA)
    users = settings_of(conn.engine).users_schema
    execute_ddl(conn, sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(shared, who))
    for table in _shared_tables(conn):
        privileges = _privileges(expected_table_privileges(SHARED_SCHEMA, table))
        execute_ddl(
            conn,
            sql.SQL("GRANT {} ON {}.{} TO {}").format(
                privileges, shared, sql.Identifier(table), who
            ),
        )
    # The IAM's users: read (a name for an id); never written by the application.
    execute_ddl(conn, sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(users), who))
    execute_ddl(
        conn,
        sql.SQL("GRANT SELECT ON {}.users TO {}").format(sql.Identifier(users), who),
    )


def _shared_tables(conn: Connection) -> list[str]:
    query = (
        sa.select(PG_CLASS.c.relname)
        .join(PG_NAMESPACE, PG_NAMESPACE.c.oid == PG_CLASS.c.relnamespace)
        .where(PG_NAMESPACE.c.nspname == SHARED_SCHEMA, PG_CLASS.c.relkind == "r")
        .order_by(PG_CLASS.c.relname)
    )
    return [str(name) for name in conn.execute(query).scalars()]


def recorded_roles(conn: Connection) -> list[str]:
    """The application roles ``dms roles setup`` recorded (none before it, or before 0023)."""
    table = sa.func.to_regclass(f"{SHARED_SCHEMA}.{application_roles.name}")
    if conn.execute(sa.select(table)).scalar_one() is None:
        return []
    query = sa.select(application_roles.c.role_name).order_by(application_roles.c.role_name)
    return [str(name) for name in conn.execute(query).scalars()]


def grant_tenants(conn: Connection, schemas: Sequence[str]) -> None:
    """Grant ``schemas`` (tenants') to every recorded application role.

    In ``conn``'s transaction: what a new tenant or a migrated one needs, once its tables exist.
    """
    roles = recorded_roles(conn)
    if roles and schemas:
        _grant(conn, schemas, roles)


def _grant(conn: Connection, schemas: Sequence[str], roles: Iterable[str]) -> None:
    """The tenant privileges of ``roles`` on ``schemas``, in a few statements for any count.

    Every table is written, then what the narrowed tables may not do is taken back.
    """
    names = sql.SQL(", ").join(sql.Identifier(schema) for schema in schemas)
    who = sql.SQL(", ").join(sql.Identifier(role) for role in roles)
    execute_ddl(conn, sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(names, who))
    execute_ddl(
        conn,
        sql.SQL("GRANT {} ON ALL TABLES IN SCHEMA {} TO {}").format(_privileges(WRITE), names, who),
    )
    for table, kept in _TENANT_NARROWED.items():
        tables = sql.SQL(", ").join(
            sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
            for schema in schemas
        )
        taken = [privilege for privilege in WRITE if privilege not in kept]
        execute_ddl(
            conn,
            sql.SQL("REVOKE {} ON {} FROM {}").format(_privileges(taken), tables, who),
        )


def _privileges(names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.SQL(name) for name in names)


def problems(conn: Connection, schemas: Sequence[str]) -> list[PrivilegeProblem]:
    """Each privilege a recorded role lacks or holds beyond its need, shared schema included.

    ``schemas``: the tenants' to read; sorted by schema, table, role and privilege. Read with
    ``has_table_privilege``: what a role holds through ``PUBLIC`` or another role counts
    too, as it does for PostgreSQL.
    """
    found: list[PrivilegeProblem] = []
    everything = [SHARED_SCHEMA, *schemas]
    for role in recorded_roles(conn):
        found += _creation_problems(conn, role)
        for start in range(0, len(everything), SCHEMAS_PER_GRANT):
            chunk = everything[start : start + SCHEMAS_PER_GRANT]
            found += _schema_problems(conn, role, chunk) + _table_problems(conn, role, chunk)
    return sorted(found, key=lambda p: (p.schema, p.table or "", p.role, p.privilege))


def missing_privilege(conn: Connection) -> PrivilegeProblem | None:
    """The first privilege the connected role lacks of what the application needs, if any.

    What a refusal that names no rule of dms is explained with: the shared schema and the
    IAM's users first, then every registered tenant (when the registry can be read at all),
    for ``current_user``.
    """
    role = str(conn.execute(sa.select(sa.func.current_user())).scalar_one())
    users = settings_of(conn.engine).users_schema
    found = _first_missing(conn, role, [SHARED_SCHEMA, users], users)
    if (
        found is not None
        or not conn.execute(
            sa.select(sa.func.has_table_privilege(f"{SHARED_SCHEMA}.tenants", "SELECT"))
        ).scalar_one()
    ):
        return found
    return _first_missing(conn, role, sorted(registered_schemas(conn)), users)


def _first_missing(
    conn: Connection, role: str, schemas: Sequence[str], users: str
) -> PrivilegeProblem | None:
    for start in range(0, len(schemas), SCHEMAS_PER_GRANT):
        chunk = schemas[start : start + SCHEMAS_PER_GRANT]
        for problem in _schema_problems(conn, role, chunk) + _table_problems(conn, role, chunk):
            # Of the IAM's schema, only its users table is the application's business.
            if problem.missing and (problem.schema != users or problem.table in (None, "users")):
                return problem
    return None


def _schema_problems(conn: Connection, role: str, schemas: Sequence[str]) -> list[PrivilegeProblem]:
    usage = sa.func.has_schema_privilege(role, PG_NAMESPACE.c.oid, "USAGE")
    create = sa.func.has_schema_privilege(role, PG_NAMESPACE.c.oid, "CREATE")
    query = sa.select(PG_NAMESPACE.c.nspname, usage, create).where(
        PG_NAMESPACE.c.nspname.in_(schemas)
    )
    found: list[PrivilegeProblem] = []
    for schema, has_usage, has_create in conn.execute(query):
        if not has_usage:
            found.append(_problem(role, schema, None, "USAGE", missing=True))
        if has_create:
            found.append(_problem(role, schema, None, "CREATE", missing=False))
    return found


def _creation_problems(conn: Connection, role: str) -> list[PrivilegeProblem]:
    """Where ``role`` could create objects of its own.

    The database (``TEMPORARY``, ``CREATE``) and any schema but the system's (``CREATE``).
    """
    database = sa.func.current_database()
    held = conn.execute(
        sa.select(
            database,
            sa.func.has_database_privilege(role, database, "TEMPORARY"),
            sa.func.has_database_privilege(role, database, "CREATE"),
        )
    ).one()
    name, temporary, create = held
    found = [
        _problem(role, name, None, privilege, missing=False, database=True)
        for privilege, has in (("TEMPORARY", temporary), ("CREATE", create))
        if has
    ]
    creatable = sa.select(PG_NAMESPACE.c.nspname).where(
        sa.func.has_schema_privilege(role, PG_NAMESPACE.c.oid, "CREATE"),
        PG_NAMESPACE.c.nspname.not_like("pg\\_%"),
        PG_NAMESPACE.c.nspname != "information_schema",
        # dms's own schemas are read with their tables (_schema_problems).
        PG_NAMESPACE.c.nspname != SHARED_SCHEMA,
        PG_NAMESPACE.c.nspname.not_like("tenant\\_%"),
    )
    found += [
        _problem(role, schema, None, "CREATE", missing=False)
        for schema in conn.execute(creatable).scalars()
    ]
    return found


def _table_problems(conn: Connection, role: str, schemas: Sequence[str]) -> list[PrivilegeProblem]:
    privilege = (
        sa.func.unnest(sa.literal(list(TABLE_PRIVILEGES), sa.ARRAY(sa.Text)))
        .table_valued("name")
        .render_derived(name="privilege")
    )
    held = sa.func.has_table_privilege(role, PG_CLASS.c.oid, privilege.c.name)
    query = (
        sa.select(PG_NAMESPACE.c.nspname, PG_CLASS.c.relname, privilege.c.name, held)
        .select_from(PG_CLASS)
        .join(PG_NAMESPACE, PG_NAMESPACE.c.oid == PG_CLASS.c.relnamespace)
        .join(privilege, sa.true())
        .where(PG_NAMESPACE.c.nspname.in_(schemas), PG_CLASS.c.relkind == "r")
    )
    return [
        _problem(role, schema, table, name, missing=not has)
        for schema, table, name, has in conn.execute(query)
        if has != (name in expected_table_privileges(schema, table))
    ]


def _problem(
    role: str,
    schema: str,
    table: str | None,
    privilege: str,
    *,
    missing: bool,
    database: bool = False,
) -> PrivilegeProblem:
    return PrivilegeProblem(
        role=role,
        schema=schema,
        table=table,
        privilege=privilege,
        missing=missing,
        database=database,
    )


#: The engines :func:`warn_once_if_unprotected` has looked at (an engine's URL names one
#: database and role): a unit of work costs a set lookup, not a query.
_warned: weakref.WeakSet[Engine] = weakref.WeakSet()


def acting_role_warning(conn: Connection) -> str | None:
    """Why the policies do not hold the role ``conn`` acts as, or ``None`` if they do.

    A superuser and a ``BYPASSRLS`` role are exempt from every policy; the owner of the
    shared schema is the migrating role, and an application that connects as it can change
    what the policies and triggers are.
    """
    role = sa.func.current_user()
    owner = sa.select(sa.func.pg_get_userbyid(PG_NAMESPACE.c.nspowner)).where(
        PG_NAMESPACE.c.nspname == SHARED_SCHEMA
    )
    row = conn.execute(
        sa.select(
            PG_ROLES.c.rolname,
            PG_ROLES.c.rolsuper,
            PG_ROLES.c.rolbypassrls,
            owner.scalar_subquery() == PG_ROLES.c.rolname,
        ).where(PG_ROLES.c.rolname == role)
    ).one()
    name, superuser, bypass, owns = row
    if superuser:
        why = "a superuser"
    elif bypass:
        why = "a BYPASSRLS role"
    elif owns:
        why = "the owner of dms's schemas"
    else:
        return None
    return (
        f"dms connects as role {name}, {why}: PostgreSQL does not hold it to the row-level "
        "security that keeps users apart; connect the application as its own role "
        '(dms roles setup, docs/operations.md, "Roles: who owns what")'
    )


def warn_once_if_unprotected(conn: Connection) -> None:
    """Log :func:`acting_role_warning` once per engine (so per database and role)."""
    if conn.engine in _warned:
        return
    _warned.add(conn.engine)
    warning = acting_role_warning(conn)
    if warning is not None:
        log.warning(warning)
