"""Content-addressed blobs shared by revisions; provenance of imported files.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

Tenant only.

Upgrade:

* ``file_revisions.storage_key`` is no longer unique (``uq_file_revisions_storage_key`` goes):
  revisions with identical bytes share one content-addressed blob. A plain index
  (``ix_file_revisions_storage_key``) answers "is this blob still referenced?";
* ``blobs``: one row per content-addressed blob, the row that writers and the release of
  unreferenced blobs lock (``dms.blobs``). Revisions that already use content-addressed keys
  (``<tenant>/sha256/<2 hex>/<sha256>``, ending in their own hash) get their rows;
* ``import_provenance``: the source name (raw bytes), path and content hash of every imported
  folder and document, which makes ``dms import`` resumable.

Downgrade restores the unique storage key, which is only possible while no two revisions
share one: if some do, it refuses with :class:`~dms.errors.MigrationError`, naming how many
keys and a few of them, and the tenant stays at 0004 (purge the documents that share blobs, or
keep 0004). Otherwise it drops both tables: the import provenance goes with them (a later
import of the same tree cannot resume and imports it again, renamed) and so does the blob
registry (its rows come back from the revisions on the next upgrade).

The shared part is empty: the shared schema still moves to 0004, so the fleet reports one head.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.errors import MigrationError
from dms.migrations import MigrationScope

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

#: Frozen copy of the content-key shape of dms.storage.content_key at this revision.
CONTENT_KEY_PATTERN = "/sha256/[0-9a-f]{2}/[0-9a-f]{64}$"
#: Shared keys named in the downgrade's refusal.
SHOWN_KEYS = 3


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema, scope.users_schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)


def _timestamp(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now())


def _upgrade_tenant(schema: str, users_schema: str) -> None:
    op.drop_constraint("uq_file_revisions_storage_key", "file_revisions", schema=schema)
    op.create_index(
        "ix_file_revisions_storage_key", "file_revisions", ["storage_key"], schema=schema
    )
    _create_blobs(schema)
    _create_import_provenance(schema, users_schema)
    _register_content_addressed_blobs(schema)


def _create_blobs(schema: str) -> None:
    op.create_table(
        "blobs",
        sa.Column("storage_key", sa.Text, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        _timestamp("created_at"),
        _timestamp("claimed_at"),
        sa.PrimaryKeyConstraint("storage_key", name="pk_blobs"),
        sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name=op.f("ck_blobs_sha256_hex")),
        sa.CheckConstraint("size_bytes >= 0", name=op.f("ck_blobs_size_not_negative")),
        sa.CheckConstraint(
            "right(storage_key, 65) = '/' || sha256",
            name=op.f("ck_blobs_key_is_content_address"),
        ),
        schema=schema,
    )


def _create_import_provenance(schema: str, users_schema: str) -> None:
    op.create_table(
        "import_provenance",
        sa.Column("id", sa.Uuid, nullable=False, server_default=sa.func.gen_random_uuid()),
        sa.Column("parent_id", sa.Uuid),
        sa.Column("source_name", sa.LargeBinary, nullable=False),
        sa.Column("source_path", sa.LargeBinary, nullable=False),
        sa.Column("folder_id", sa.Uuid),
        sa.Column("document_id", sa.Uuid),
        sa.Column("sha256", sa.Text),
        sa.Column("imported_by", sa.Uuid, nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_import_provenance"),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            [f"{schema}.folders.id"],
            name="fk_import_provenance_parent_id_folders",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["folder_id"],
            [f"{schema}.folders.id"],
            name="fk_import_provenance_folder_id_folders",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["document_id"],
            [f"{schema}.documents.id"],
            name="fk_import_provenance_document_id_documents",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "num_nonnulls(folder_id, document_id) = 1",
            name=op.f("ck_import_provenance_one_entry"),
        ),
        sa.CheckConstraint(
            "(document_id IS NULL) = (sha256 IS NULL)",
            name=op.f("ck_import_provenance_documents_have_sha256"),
        ),
        sa.CheckConstraint(
            "sha256 ~ '^[0-9a-f]{64}$'", name=op.f("ck_import_provenance_sha256_hex")
        ),
        sa.CheckConstraint(
            "octet_length(source_name) BETWEEN 1 AND 1024",
            name=op.f("ck_import_provenance_source_name_valid"),
        ),
        schema=schema,
    )
    op.create_index(
        "uq_import_provenance_source",
        "import_provenance",
        ["parent_id", "source_name"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
    )
    op.create_index(
        "uq_import_provenance_folder_id",
        "import_provenance",
        ["folder_id"],
        unique=True,
        schema=schema,
    )
    op.create_index(
        "uq_import_provenance_document_id",
        "import_provenance",
        ["document_id"],
        unique=True,
        schema=schema,
    )
    op.create_index(
        "ix_import_provenance_imported_by", "import_provenance", ["imported_by"], schema=schema
    )
    # A statement of its own (not a clause of CREATE TABLE), so that revision 0008, which
    # replaces it, cancels it out of the recording new tenants are created from
    # (dms.migrations.template): adding a key to users costs more the more tenants there are.
    op.create_foreign_key(
        "fk_import_provenance_imported_by_users",
        "import_provenance",
        "users",
        ["imported_by"],
        ["id"],
        source_schema=schema,
        referent_schema=users_schema,
        ondelete="RESTRICT",
    )


def _revisions(schema: str) -> sa.TableClause:
    return sa.table(
        "file_revisions",
        sa.column("storage_key", sa.Text),
        sa.column("sha256", sa.Text),
        sa.column("size_bytes", sa.BigInteger),
        schema=schema,
    )


def _register_content_addressed_blobs(schema: str) -> None:
    """Rows for the content-addressed keys that revisions already use (after a downgrade)."""
    revisions = _revisions(schema)
    registry = sa.table(
        "blobs",
        sa.column("storage_key", sa.Text),
        sa.column("sha256", sa.Text),
        sa.column("size_bytes", sa.BigInteger),
        schema=schema,
    )
    content_addressed = sa.and_(
        revisions.c.storage_key.regexp_match(CONTENT_KEY_PATTERN),
        sa.func.right(revisions.c.storage_key, 64) == revisions.c.sha256,
    )
    rows = (
        sa.select(
            revisions.c.storage_key,
            sa.func.min(revisions.c.sha256).label("sha256"),
            sa.func.min(revisions.c.size_bytes).label("size_bytes"),
        )
        .where(content_addressed)
        .group_by(revisions.c.storage_key)
        .cte("content_addressed")
    )
    # The rows in a CTE at the top of the statement (what PostgreSQL inlines anyway): Citus
    # 13.2 cannot run INSERT ... SELECT from a table of a distributed schema into one whose
    # defaults call now(), and a tenant already distributed at 0003 reaches this on upgrade.
    op.get_bind().execute(
        sa.insert(registry)
        .from_select(["storage_key", "sha256", "size_bytes"], sa.select(*rows.c))
        .add_cte(rows, nest_here=True)
    )


def _require_unshared_keys(schema: str) -> None:
    revisions = _revisions(schema)
    shared = (
        sa.select(revisions.c.storage_key)
        .group_by(revisions.c.storage_key)
        .having(sa.func.count() > 1)
        .subquery()
    )
    bind = op.get_bind()
    count = bind.scalar(sa.select(sa.func.count()).select_from(shared)) or 0
    if count:
        examples = bind.scalars(
            sa.select(shared.c.storage_key).order_by(shared.c.storage_key).limit(SHOWN_KEYS)
        ).all()
        raise MigrationError(
            f"cannot restore the unique storage key of {schema}.file_revisions: {count} "
            f"storage key(s) are shared by several revisions (e.g. {', '.join(examples)}); "
            "purge the documents that share them, or stay at 0004"
        )


def _downgrade_tenant(schema: str) -> None:
    _require_unshared_keys(schema)
    op.drop_table("import_provenance", schema=schema)
    op.drop_table("blobs", schema=schema)
    op.drop_index("ix_file_revisions_storage_key", "file_revisions", schema=schema)
    op.create_unique_constraint(
        "uq_file_revisions_storage_key", "file_revisions", ["storage_key"], schema=schema
    )
