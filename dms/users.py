"""The IAM service's ``users`` table: how ``dms`` checks for it, and a stand-in for development.

``users`` belongs to a separate IAM service; tenant tables only reference ``users(id)``. In
production ``dms`` never creates it. For development and tests :func:`create_users_stand_in`
creates a minimal table with the same key in the configured schema (``dms users stand-in``);
the embedded development server gets it automatically. On a Citus cluster the stand-in is a
reference table, as the IAM's real table must be there (every node holds a copy, so tenant
tables on every node keep their foreign keys to it).
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.schema import CreateSchema

from dms import citus
from dms.config import Settings, settings_of
from dms.domain.validation import check_text
from dms.errors import UsersTableMissing, ValidationError
from dms.schema.naming import NAMING_CONVENTION


@functools.cache
def users_stand_in(schema: str) -> sa.Table:
    """The development stand-in in ``schema``; the real table may have more columns.

    Declared with its real schema rather than routed with ``schema_translate_map``: the helpers
    below then work on any connection, tenant-routed or not, and leave its options alone.
    """
    metadata = sa.MetaData(schema=schema, naming_convention=NAMING_CONVENTION)
    return sa.Table(
        "users",
        metadata,
        sa.Column("id", sa.Uuid, primary_key=True, server_default=sa.func.gen_random_uuid()),
        sa.Column("email", sa.Text, nullable=False, unique=True),
        sa.Column("display_name", sa.Text, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )


def users_table_exists(conn: Connection, settings: Settings | None = None) -> bool:
    """Whether ``<users schema>.users`` exists (``settings`` default to ``conn``'s)."""
    settings = settings if settings is not None else settings_of(conn)
    qualified = sa.literal(f"{settings.users_schema}.users")
    return conn.scalar(sa.select(sa.func.to_regclass(qualified).is_not(None))) is True


def require_users_table(conn: Connection, settings: Settings | None = None) -> None:
    """Raise :class:`UsersTableMissing`, naming the table and the way out, if it is absent."""
    settings = settings or settings_of(conn)
    if not users_table_exists(conn, settings):
        raise UsersTableMissing(
            f'table "{settings.users_schema}.users" does not exist. It belongs to the IAM '
            "service; for development create a stand-in with: dms users stand-in"
        )


def create_users_stand_in(engine: Engine, settings: Settings | None = None) -> bool:
    """Create the development stand-in ``users`` table unless a ``users`` table exists.

    Returns whether it created the table. Safe when several processes call it at once: the
    check and the creation run under a transaction-level advisory lock. ``settings`` default
    to ``engine``'s.
    """
    settings = settings if settings is not None else settings_of(engine)
    with engine.begin() as conn:
        key = sa.func.hashtextextended(sa.literal(f"dms.users-stand-in:{settings.users_schema}"), 0)
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))
        if users_table_exists(conn, settings):
            return False
        # Never a distributed schema on Citus: users must be a reference table instead.
        citus.keep_schema_local(conn)
        conn.execute(CreateSchema(settings.users_schema, if_not_exists=True))
        users_stand_in(settings.users_schema).create(conn)
        # On Citus, every node holds it: each node's tenant tables reference it.
        citus.make_reference_table(conn, settings.users_schema, "users")
    return True


@dataclass(frozen=True, kw_only=True)
class StandInUser:
    """A user of the development stand-in ``users`` table."""

    id: uuid.UUID
    email: str
    display_name: str


def list_users(conn: Connection, *, settings: Settings | None = None) -> list[StandInUser]:
    """The users of the development stand-in, by e-mail. Development only.

    Raises :class:`~dms.errors.UsersTableMissing` if there is no ``users`` table.
    ``settings`` default to ``conn``'s.
    """
    settings = settings if settings is not None else settings_of(conn)
    require_users_table(conn, settings)
    users = users_stand_in(settings.users_schema)
    rows = conn.execute(
        sa.select(users.c.id, users.c.email, users.c.display_name).order_by(users.c.email)
    )
    return [StandInUser(id=row.id, email=row.email, display_name=row.display_name) for row in rows]


def create_user(
    conn: Connection, *, email: str, display_name: str, settings: Settings | None = None
) -> uuid.UUID:
    """Insert a stand-in user (or find it by e-mail) and return its id. Development only.

    Both texts are stored as given; one that is not a string PostgreSQL can store, or a blank
    e-mail, raises :class:`~dms.errors.ValidationError` before any SQL. ``settings`` default
    to ``conn``'s.
    """
    check_text("e-mail", email)
    check_text("display name", display_name)
    if not email.strip():
        raise ValidationError("a user's e-mail must not be blank")
    settings = settings if settings is not None else settings_of(conn)
    users = users_stand_in(settings.users_schema)
    inserted: uuid.UUID | None = conn.scalar(
        insert(users)
        .values(email=email, display_name=display_name)
        .on_conflict_do_nothing(index_elements=["email"])
        .returning(users.c.id)
    )
    if inserted is not None:
        return inserted
    existing: uuid.UUID = conn.execute(
        sa.select(users.c.id).where(users.c.email == email)
    ).scalar_one()
    return existing
