"""Tables of the shared ``dms`` schema: what the library owns across tenants."""

from __future__ import annotations

import sqlalchemy as sa

from dms.config import SHARED_SCHEMA
from dms.schema.naming import NAMING_CONVENTION

metadata = sa.MetaData(schema=SHARED_SCHEMA, naming_convention=NAMING_CONVENTION)

#: A tenant key, as a regular expression that means the same to Python and PostgreSQL: the
#: registry's CHECK and :func:`dms.tenancy.validate_slug` both use it (anchored on each side).
TENANT_SLUG_PATTERN = "[a-z][a-z0-9_]{0,39}"

#: The registry: the source of truth for which tenant schemas exist.
tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("slug", sa.Text, primary_key=True),
    sa.Column("schema_name", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="active"),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
    # The tenant schema's Alembic revision (NULL: base), written in the same transaction as the
    # schema's own alembic_version by every migration (dms.migrations.registry): fleet status
    # and a no-op upgrade read this one table instead of 10,000 version tables.
    sa.Column("revision", sa.Text, nullable=True),
    sa.UniqueConstraint("schema_name"),
    sa.CheckConstraint(f"slug ~ '^{TENANT_SLUG_PATTERN}$'", name="slug_format"),
    sa.CheckConstraint("schema_name = 'tenant_' || slug", name="schema_name_from_slug"),
    sa.CheckConstraint("state IN ('active', 'suspended')", name="state_known"),
)

#: The roles the application connects as (``dms roles setup``): the shared tables and every
#: tenant schema are granted to each, in the transaction that creates or migrates them
#: (:mod:`dms.roles`, docs/operations.md "Roles").
application_roles = sa.Table(
    "application_roles",
    metadata,
    sa.Column("role_name", sa.Text, primary_key=True),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
)
