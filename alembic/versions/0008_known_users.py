"""A tenant's rows refer to the IAM's users through one table of its own, ``known_users``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04

Tenant only. Until now six columns of every tenant (``created_by`` of folders, documents, tags
and metadata fields, ``uploaded_by`` of file revisions, ``imported_by`` of import provenance)
each had a foreign key to ``users``. PostgreSQL enforces a foreign key with two triggers on the
*referenced* table, so ``users`` carried twelve triggers per tenant: 67,176 at 5,598 tenants,
120,000 at 10,000. Every backend loads that list when it first touches ``users`` (tens of
milliseconds and megabytes each, the IAM's own connections included), every new key rebuilds it
(35 ms per key at 3,300 tenants against 0.7 ms on an empty database), and creating tenants got
slower with every tenant created.

Now each tenant has ``known_users(id)``, the users its rows refer to, with the tenant's only
foreign key to ``users`` (two triggers on ``users`` per tenant), and the six columns refer to
``known_users`` instead. A trigger on each of the six tables (``known_users_enlist``) adds the
user to ``known_users`` before the row is written, so writers see no difference: a row naming
a user who exists is accepted, one naming a user who does not is refused by
``fk_known_users_id_users``. The rule of the IAM's side is kept as well: ``known_users``
follows a user's deletion (ON DELETE CASCADE), and that cascade is refused (ON DELETE RESTRICT
of the six keys) while any row of the tenant still names the user, so a user can be deleted
exactly when no tenant row refers to them, as before.

The upgrade fills ``known_users`` from the six columns before it swaps the keys; the key to
``users`` comes last, for the reason ``_add_user_references`` of revision 0001 gives. The
downgrade puts revision 0007's keys back, under their old names, and drops what this added.
"""

from __future__ import annotations

import sqlalchemy as sa
from psycopg import sql

from alembic import op
from dms.migrations import MigrationScope
from dms.schema.ddl import execute_ddl

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

#: The columns that name a user, as (table, column): frozen copy at this revision.
USER_REFERENCES = (
    ("folders", "created_by"),
    ("documents", "created_by"),
    ("file_revisions", "uploaded_by"),
    ("tags", "created_by"),
    ("metadata_fields", "created_by"),
    ("import_provenance", "imported_by"),
)

ENLIST = "known_users_enlist"

#: The trigger function's body. The column is the trigger's argument; each branch reads only
#: its own column, because PL/pgSQL resolves ``NEW.<column>`` when the branch first runs. A
#: NULL is left to the column's NOT NULL constraint, which names the column.
ENLIST_BODY = """
DECLARE
    user_id uuid;
BEGIN
    IF TG_ARGV[0] = 'uploaded_by' THEN
        user_id := NEW.uploaded_by;
    ELSIF TG_ARGV[0] = 'imported_by' THEN
        user_id := NEW.imported_by;
    ELSE
        user_id := NEW.created_by;
    END IF;
    IF user_id IS NOT NULL THEN
        INSERT INTO known_users (id) VALUES (user_id) ON CONFLICT (id) DO NOTHING;
    END IF;
    RETURN NEW;
END
"""


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema, scope.users_schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema, scope.users_schema)


def _upgrade_tenant(schema: str, users_schema: str) -> None:
    op.create_table(
        "known_users",
        sa.Column("id", sa.Uuid, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_known_users"),
        schema=schema,
    )
    _fill_known_users(schema)
    for table, column in USER_REFERENCES:
        op.drop_constraint(f"fk_{table}_{column}_users", table, schema=schema)
        op.create_foreign_key(
            f"fk_{table}_{column}_known_users",
            table,
            "known_users",
            [column],
            ["id"],
            source_schema=schema,
            referent_schema=schema,
            ondelete="RESTRICT",
        )
    _create_enlist_triggers(schema)
    op.create_foreign_key(
        "fk_known_users_id_users",
        "known_users",
        "users",
        ["id"],
        ["id"],
        source_schema=schema,
        referent_schema=users_schema,
        ondelete="CASCADE",
    )


def _fill_known_users(schema: str) -> None:
    known_users = sa.table("known_users", sa.column("id", sa.Uuid), schema=schema)
    named = sa.union(
        *(
            sa.select(sa.table(table, sa.column(column, sa.Uuid), schema=schema).c[column])
            for table, column in USER_REFERENCES
        )
    )
    op.execute(sa.insert(known_users).from_select(["id"], named))


def _create_enlist_triggers(schema: str) -> None:
    bind = op.get_bind()
    execute_ddl(
        bind,
        sql.SQL(
            "CREATE FUNCTION {}.{}() RETURNS trigger LANGUAGE plpgsql "
            "SET search_path = {}, pg_temp AS {}"
        ).format(
            sql.Identifier(schema),
            sql.Identifier(ENLIST),
            sql.Identifier(schema),
            sql.Literal(ENLIST_BODY),
        ),
    )
    for table, column in USER_REFERENCES:
        execute_ddl(
            bind,
            sql.SQL(
                "CREATE TRIGGER {} BEFORE INSERT OR UPDATE OF {} ON {}.{} "
                "FOR EACH ROW EXECUTE FUNCTION {}.{}({})"
            ).format(
                sql.Identifier(ENLIST),
                sql.Identifier(column),
                sql.Identifier(schema),
                sql.Identifier(table),
                sql.Identifier(schema),
                sql.Identifier(ENLIST),
                sql.Literal(column),
            ),
        )


def _downgrade_tenant(schema: str, users_schema: str) -> None:
    bind = op.get_bind()
    for table, _column in USER_REFERENCES:
        execute_ddl(
            bind,
            sql.SQL("DROP TRIGGER {} ON {}.{}").format(
                sql.Identifier(ENLIST), sql.Identifier(schema), sql.Identifier(table)
            ),
        )
    execute_ddl(
        bind,
        sql.SQL("DROP FUNCTION {}.{}()").format(sql.Identifier(schema), sql.Identifier(ENLIST)),
    )
    for table, column in USER_REFERENCES:
        op.drop_constraint(f"fk_{table}_{column}_known_users", table, schema=schema)
    op.drop_table("known_users", schema=schema)
    for table, column in USER_REFERENCES:
        op.create_foreign_key(
            f"fk_{table}_{column}_users",
            table,
            "users",
            [column],
            ["id"],
            source_schema=schema,
            referent_schema=users_schema,
            ondelete="RESTRICT",
        )
