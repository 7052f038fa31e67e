"""The IAM service's ``users`` table: how ``dms`` checks for it, and a stand-in for development.

``users`` belongs to a separate IAM service; tenant tables only reference ``users(id)``. In
production ``dms`` never creates it. For development and tests :func:`create_users_stand_in`
creates a minimal table with the same key in the configured schema (``dms users stand-in``);
the embedded development server gets it automatically.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.schema import CreateSchema

from dms.config import Settings
from dms.schema.naming import NAMING_CONVENTION
from dms.schema.tenant import USERS_SCHEMA

_stand_in_metadata = sa.MetaData(schema=USERS_SCHEMA, naming_convention=NAMING_CONVENTION)

#: The development stand-in; the real table may have more columns, ``dms`` needs only ``id``.
users_stand_in = sa.Table(
    "users",
    _stand_in_metadata,
    sa.Column("id", sa.Uuid, primary_key=True, server_default=sa.func.gen_random_uuid()),
    sa.Column("email", sa.Text, nullable=False, unique=True),
    sa.Column("display_name", sa.Text, nullable=False),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
)


def _routed(conn: Connection, settings: Settings) -> Connection:
    return conn.execution_options(schema_translate_map={USERS_SCHEMA: settings.users_schema})


def users_table_exists(conn: Connection, settings: Settings | None = None) -> bool:
    """Whether ``<users schema>.users`` exists."""
    settings = settings or Settings.from_env()
    qualified = sa.literal(f"{settings.users_schema}.users")
    return conn.scalar(sa.select(sa.func.to_regclass(qualified).is_not(None))) is True


def create_users_stand_in(engine: Engine, settings: Settings | None = None) -> bool:
    """Create the development stand-in ``users`` table unless a ``users`` table exists.

    Returns whether it created the table.
    """
    settings = settings or Settings.from_env()
    with engine.begin() as conn:
        if users_table_exists(conn, settings):
            return False
        conn.execute(CreateSchema(settings.users_schema, if_not_exists=True))
        _stand_in_metadata.create_all(_routed(conn, settings), checkfirst=False)
    return True


def create_user(
    conn: Connection, *, email: str, display_name: str, settings: Settings | None = None
) -> uuid.UUID:
    """Insert a stand-in user (or find it by e-mail) and return its id. Development only."""
    settings = settings or Settings.from_env()
    routed = _routed(conn, settings)
    inserted: uuid.UUID | None = routed.scalar(
        insert(users_stand_in)
        .values(email=email, display_name=display_name)
        .on_conflict_do_nothing(index_elements=["email"])
        .returning(users_stand_in.c.id)
    )
    if inserted is not None:
        return inserted
    existing: uuid.UUID = routed.execute(
        sa.select(users_stand_in.c.id).where(users_stand_in.c.email == email)
    ).scalar_one()
    return existing
