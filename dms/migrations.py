"""Alembic migrations of the shared schema and of every tenant schema, up and down.

One chain of revisions; each revision has a shared part and a tenant part
(``upgrade(scope=...)`` looks at :attr:`MigrationScope.kind`). The shared schema and every
tenant schema keep their own ``alembic_version`` table, so each moves on its own:

* the shared schema ``dms`` migrates first, in its own transaction;
* then each registered tenant, each in its own transaction under a per-tenant advisory lock and
  ``lock_timeout``. A failing tenant rolls back alone and is reported (:class:`MigrationFailed`)
  while the others go on; two concurrent runs serialise per tenant instead of colliding;
* tenants already at the target revision are skipped without opening a transaction: the
  revision of every tenant is read with one query, so a no-op run over thousands of tenants
  takes seconds.

Alembic's ``command`` API and its ``op`` proxy are process-global and not thread-safe: every
entry point here holds :data:`_ALEMBIC_LOCK`. To migrate in parallel, use processes.
"""

from __future__ import annotations

import threading
from argparse import Namespace
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection, Engine

from alembic import command
from dms import tenancy
from dms.config import SHARED_SCHEMA, Settings
from dms.errors import (
    DmsError,
    MigrationError,
    MigrationFailed,
    TenantFailure,
    TenantNotFound,
    UsersTableMissing,
)
from dms.jobs import tables as _job_tables  # noqa: F401 -- puts the job tables on shared.metadata
from dms.schema import shared, tenant
from dms.schema.shared import tenants
from dms.users import users_table_exists

_ALEMBIC_LOCK = threading.RLock()
_VERSION_TABLE = "alembic_version"


@dataclass(frozen=True, kw_only=True)
class MigrationScope:
    """Which schema a revision's ``upgrade``/``downgrade`` acts on, and how."""

    kind: Literal["shared", "tenant"]
    schema: str
    users_schema: str

    @classmethod
    def shared(cls, settings: Settings | None = None) -> MigrationScope:
        """The scope of the shared ``dms`` schema."""
        settings = settings or Settings.from_env()
        return cls(kind="shared", schema=SHARED_SCHEMA, users_schema=settings.users_schema)

    @classmethod
    def tenant(cls, schema: str, settings: Settings | None = None) -> MigrationScope:
        """The scope of one tenant schema."""
        settings = settings or Settings.from_env()
        return cls(kind="tenant", schema=schema, users_schema=settings.users_schema)

    @property
    def is_tenant(self) -> bool:
        """Whether this scope is a tenant schema."""
        return self.kind == "tenant"


@dataclass(frozen=True, kw_only=True)
class SchemaStatus:
    """Migration state of one tenant, as the registry and the catalog see it."""

    slug: str
    schema_name: str
    registered: bool
    schema_exists: bool
    revision: str | None
    at_head: bool


@dataclass(frozen=True, kw_only=True)
class FleetStatus:
    """Migration state of the shared schema and every tenant."""

    head: str
    shared_revision: str | None
    tenants: tuple[SchemaStatus, ...]

    @property
    def healthy(self) -> bool:
        """Everything is at head, registered and present."""
        return self.shared_revision == self.head and all(
            t.at_head and t.registered and t.schema_exists for t in self.tenants
        )


def script_location() -> Path:
    """The directory of the Alembic environment: inside the installed package, or the repo's."""
    packaged = Path(__file__).parent / "_alembic"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "alembic"


def alembic_config(url: str | URL | None = None, *, cmd_opts: Namespace | None = None) -> Config:
    """An Alembic ``Config`` for ``dms``'s environment, without needing ``alembic.ini``.

    ``cmd_opts``: alembic's parsed command line, for ``dms alembic ...``.
    """
    config = Config(cmd_opts=cmd_opts)
    config.set_main_option("script_location", str(script_location()))
    if url is not None:
        rendered = url.render_as_string(hide_password=False) if isinstance(url, URL) else url
        config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The head revision of the chain."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise MigrationError("no migration scripts found")
    return head


# --- checks -------------------------------------------------------------------------------


def require_users_table(conn: Connection, settings: Settings | None = None) -> None:
    """Raise :class:`UsersTableMissing`, naming the table and the way out, if it is absent."""
    settings = settings or Settings.from_env()
    if not users_table_exists(conn, settings):
        raise UsersTableMissing(
            f'table "{settings.users_schema}.users" does not exist. It belongs to the IAM '
            "service; for development create a stand-in with: dms users stand-in"
        )


# --- reading versions ---------------------------------------------------------------------


def _version_table(schema: str) -> sa.TableClause:
    return sa.table(_VERSION_TABLE, sa.column("version_num", sa.Text), schema=schema)


def _schemas_with_version_table(conn: Connection) -> set[str]:
    pg_class = sa.table("pg_class", sa.column("relname"), sa.column("relnamespace"))
    pg_namespace = sa.table("pg_namespace", sa.column("oid"), sa.column("nspname"))
    query = (
        sa.select(pg_namespace.c.nspname)
        .join_from(pg_class, pg_namespace, pg_class.c.relnamespace == pg_namespace.c.oid)
        .where(pg_class.c.relname == _VERSION_TABLE)
    )
    return set(conn.scalars(query))


def read_versions(conn: Connection, schemas: Iterable[str]) -> dict[str, str | None]:
    """The current revision of each schema, in one query (``None``: none or no version table)."""
    wanted = list(dict.fromkeys(schemas))
    present = _schemas_with_version_table(conn)
    selects = [
        sa.select(sa.literal(schema).label("schema"), _version_table(schema).c.version_num)
        for schema in wanted
        if schema in present
    ]
    versions: dict[str, str | None] = dict.fromkeys(wanted)
    if selects:
        for schema, version in conn.execute(sa.union_all(*selects)):
            versions[schema] = version
    return versions


def _tenant_schemas_in_catalog(conn: Connection) -> set[str]:
    pg_namespace = sa.table("pg_namespace", sa.column("nspname"))
    names = conn.scalars(
        sa.select(pg_namespace.c.nspname).where(
            pg_namespace.c.nspname.startswith("tenant_", autoescape=True)
        )
    )
    return {name for name in names if tenancy.slug_of_schema(name) is not None}


def _registered(conn: Connection) -> dict[str, str]:
    if conn.scalar(sa.select(sa.func.to_regclass(f"{SHARED_SCHEMA}.tenants"))) is None:
        return {}
    rows = conn.execute(sa.select(tenants.c.schema_name, tenants.c.slug))
    return {schema: slug for schema, slug in rows}


def fleet_status(engine: Engine) -> FleetStatus:
    """Every tenant's revision and whether it is at head, plus any registry/catalog mismatch."""
    head = head_revision()
    with engine.connect() as conn:
        registered = _registered(conn)
        in_catalog = _tenant_schemas_in_catalog(conn)
        versions = read_versions(conn, [SHARED_SCHEMA, *sorted(registered.keys() | in_catalog)])
    statuses = tuple(
        SchemaStatus(
            slug=registered.get(schema) or tenancy.slug_of_schema(schema) or schema,
            schema_name=schema,
            registered=schema in registered,
            schema_exists=schema in in_catalog,
            revision=versions[schema],
            at_head=versions[schema] == head,
        )
        for schema in sorted(registered.keys() | in_catalog)
    )
    return FleetStatus(head=head, shared_revision=versions[SHARED_SCHEMA], tenants=statuses)


# --- entry points -------------------------------------------------------------------------


def upgrade(engine: Engine, revision: str = "head", *, tenant: str | None = None) -> None:
    """Upgrade the shared schema and every tenant (or only ``tenant``) to ``revision``."""
    _run_command(command.upgrade, engine, revision, tenant, "upgrade")


def downgrade(engine: Engine, revision: str, *, tenant: str | None = None) -> None:
    """Downgrade the shared schema and every tenant (or only ``tenant``) to ``revision``."""
    _run_command(command.downgrade, engine, revision, tenant, "downgrade")


def _run_command(
    fn: Any, engine: Engine, revision: str, tenant: str | None, direction: str
) -> None:
    if tenant is not None:
        tenancy.validate_slug(tenant)
    config = alembic_config()
    config.attributes.update(engine=engine, tenant=tenant, direction=direction)
    with _ALEMBIC_LOCK:
        try:
            fn(config, revision)
        except CommandError as exc:
            raise MigrationError(str(exc)) from exc


def upgrade_schema(conn: Connection, scope: MigrationScope, revision: str = "head") -> None:
    """Migrate one schema to ``revision`` inside the caller's transaction on ``conn``."""
    config = alembic_config()
    config.attributes.update(connection=conn, scope=scope)
    with _ALEMBIC_LOCK:
        command.upgrade(config, revision)


# --- the environment (alembic/env.py calls run_from_alembic) -------------------------------


def run_from_alembic(context: EnvironmentContext) -> None:
    """Body of ``alembic/env.py``: migrate one given schema, or the whole fleet."""
    if context.is_offline_mode():
        raise CommandError("dms migrations run online only; --sql (offline) mode is not supported")
    attributes = context.config.attributes
    conn: Connection | None = attributes.get("connection")
    if conn is not None:
        _migrate_schema(context, conn, attributes["scope"])
        return
    engine: Engine | None = attributes.get("engine")
    if engine is not None:
        _migrate_fleet(context, engine, attributes.get("tenant"))
        return
    # Plain `alembic ...` on the command line: errors become CommandError, which alembic
    # prints as one line and turns into exit status 1.
    tenant_arg = context.get_x_argument(as_dictionary=True).get("tenant")
    from dms.db import create_engine  # noqa: PLC0415 -- starts a server; only when needed

    try:
        engine = create_engine(context.config.get_main_option("sqlalchemy.url") or None)
        try:
            _migrate_fleet(context, engine, tenant_arg)
        finally:
            engine.dispose()
    except DmsError as exc:
        raise CommandError(str(exc)) from exc


def _migrate_fleet(context: EnvironmentContext, engine: Engine, tenant: str | None) -> None:
    """Upgrades go shared first, then tenants; downgrades the other way round.

    Shared objects may be needed by tenant migrations, and the registry must outlive the tenant
    schemas it lists. A shared failure stops the run; a tenant failure stops only that tenant,
    and keeps a downgrade from going on to the shared schema.
    """
    settings = Settings.from_env()
    with engine.connect() as conn:
        require_users_table(conn, settings)
        schemas = _tenant_schemas(conn, tenant)
        versions = read_versions(conn, schemas)
    target = _destination(context)
    downward = _direction(context) == "downgrade"
    if tenant is None and not downward:
        _migrate_shared(context, engine, settings)
    failures = [
        failure
        for schema in schemas
        if not _already_at(context.script, target, versions[schema])
        for failure in _migrate_tenant(context, engine, MigrationScope.tenant(schema, settings))
    ]
    if failures:
        raise MigrationFailed(failures)
    if tenant is None and downward:
        _migrate_shared(context, engine, settings)


def _destination(context: EnvironmentContext) -> str | None:
    """The revision the command goes to; ``None`` for commands without one (check, current)."""
    try:
        destination = context.get_revision_argument()
    except KeyError:
        return None
    if destination is None:
        return "base"  # alembic resolves "base" to no revision at all
    return destination if isinstance(destination, str) else None


def _direction(context: EnvironmentContext) -> str:
    """``"upgrade"`` or ``"downgrade"``: from our own entry points, or alembic's command line."""
    direction = context.config.attributes.get("direction")
    if direction is None:
        command_line = getattr(context.config.cmd_opts, "cmd", None)
        direction = getattr(command_line[0], "__name__", "upgrade") if command_line else "upgrade"
    return str(direction)


def _tenant_schemas(conn: Connection, tenant: str | None) -> list[str]:
    registered = _registered(conn)
    if tenant is None:
        return sorted(registered)
    schema = tenancy.schema_name(tenant)
    if schema not in registered:
        raise TenantNotFound(f"tenant {tenant!r} does not exist")
    return [schema]


def _already_at(script: ScriptDirectory, target: object, current: str | None) -> bool:
    """Whether a schema at ``current`` has nothing to do to reach ``target``."""
    if not isinstance(target, str) or target.startswith(("+", "-")) or "@" in target:
        return False  # relative targets depend on where each schema is
    try:
        return script.as_revision_number(target) == current
    except CommandError:
        return False


def _migrate_shared(context: EnvironmentContext, engine: Engine, settings: Settings) -> None:
    with engine.begin() as conn:
        tenancy.set_lock_timeout(conn, settings)
        # The lock first: two first runs at once would otherwise both create the schema.
        _advisory_lock(conn, SHARED_SCHEMA)
        # Only when missing: even IF NOT EXISTS needs CREATE on the database, which a no-op
        # run must not require (nor run DDL at all).
        if conn.scalar(sa.select(sa.func.to_regnamespace(SHARED_SCHEMA))) is None:
            conn.execute(sa.schema.CreateSchema(SHARED_SCHEMA, if_not_exists=True))
        _migrate_schema(context, conn, MigrationScope.shared(settings))


def _migrate_tenant(
    context: EnvironmentContext, engine: Engine, scope: MigrationScope
) -> Sequence[TenantFailure]:
    try:
        with engine.begin() as conn:
            tenancy.set_lock_timeout(conn)
            _advisory_lock(conn, scope.schema)
            _migrate_schema(context, conn, scope)
    # Any error of one tenant, whatever raised it, must not stop the others: it is reported.
    except Exception as exc:
        with engine.connect() as conn:
            revision = read_versions(conn, [scope.schema])[scope.schema]
        return [
            TenantFailure(
                tenant=tenancy.slug_of_schema(scope.schema) or scope.schema,
                revision=revision,
                target=str(_destination(context)),
                error=f"{type(exc).__name__}: {exc}".splitlines()[0],
            )
        ]
    return []


def _advisory_lock(conn: Connection, schema: str) -> None:
    key = sa.func.hashtextextended(sa.literal(f"dms.migrate:{schema}"), 0)
    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


def _migrate_schema(context: EnvironmentContext, conn: Connection, scope: MigrationScope) -> None:
    context.configure(
        connection=conn,
        version_table_schema=scope.schema,
        target_metadata=_declared_metadata(scope, conn.dialect.default_schema_name),
        include_schemas=True,
        include_name=_only_schema(scope.schema),
        include_object=_not_users,
        upgrade_token=f"{scope.schema}_upgrades",
        downgrade_token=f"{scope.schema}_downgrades",
    )
    with context.begin_transaction():
        context.run_migrations(scope=scope)


def _only_schema(schema: str) -> Any:
    def include_name(name: str | None, type_: str, parent_names: dict[str, str | None]) -> bool:
        if type_ == "schema":
            return name == schema
        return not (type_ == "table" and name == _VERSION_TABLE)

    return include_name


def _not_users(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    # users belongs to the IAM service: referenced, never created or compared.
    return not (type_ == "table" and name == "users")


def _declared_metadata(scope: MigrationScope, default_schema: str | None) -> sa.MetaData:
    """What the schema should look like at head, for ``alembic check`` / autogenerate."""
    if not scope.is_tenant:
        return shared.metadata
    copy = sa.MetaData(naming_convention=tenant.metadata.naming_convention)
    # PostgreSQL reflects a reference into the default schema without a schema name.
    users_schema: Any = (
        sa.schema.BLANK_SCHEMA if scope.users_schema == default_schema else scope.users_schema
    )
    sa.Table(
        "users",
        copy,
        sa.Column("id", sa.Uuid, primary_key=True),
        schema=(None if users_schema is sa.schema.BLANK_SCHEMA else users_schema),
    )
    for table in tenant.metadata.sorted_tables:
        if table is not tenant.users:
            table.to_metadata(
                copy,
                schema=scope.schema,
                referred_schema_fn=lambda _t, _s, _fk, ref: (
                    users_schema if ref == tenant.USERS_SCHEMA else scope.schema
                ),
            )
    return copy
