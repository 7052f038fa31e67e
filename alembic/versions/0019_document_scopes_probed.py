"""A statement's set of viewable scopes leaves out documents' own scopes, which are probed.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07

Tenant only. Revision 0016 reads, once per statement and per table a policy reads, the set of
every scope the actor may view, and hashes it. A document with entries of its own is a scope
too, so a user in a group named in 5,000 single-document entries ("shared with") carried 7,682
scopes into every statement: about 2 ms to read and hash each time, before a row was read (a
folder's 100 documents: 1.3 ms as superuser, 2.9 ms as that user; a rare word, which reads the
set three times: 2.4 ms and 7.4 ms; bench/results/access.md).

* ``access_grants.on_document``: whether the grant's scope is a document's (derived like the
  rest of the table: ``access_refresh`` writes it). Existing grants are marked here.
* ``ix_access_grants_principal_id`` holds it after the principal, so that the set of the
  actor's folder and root scopes is a range of the index (207 grants for that user).
* The policies: a folder's scope is never a document's, so ``folders`` reads the smaller set;
  a document under its folder's scope (``access_scope <> id``) is looked up in that set, and a
  document that is its own scope is probed by primary key (``pk_access_grants``), row by row:
  ``OFFSET 0`` keeps PostgreSQL from hashing that probe into a set of its own. On Citus the
  same rules as functions of the row's columns (``access_document_row_visible`` for documents).
* ``search_visible_parts`` and ``search_visible_titles`` (revision 0017) write the same rule.

Who sees what does not change. The downgrade puts back 0016's and 0017's functions and
policies, drops the column and restores the index.
"""

from __future__ import annotations

import sqlalchemy as sa
from psycopg import sql

from alembic import op
from dms import citus
from dms.migrations import MigrationScope
from dms.migrations.steps import earlier_revision
from dms.schema.ddl import FunctionSource, create_functions, drop_function, execute_ddl

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | None = None
depends_on: str | None = None

_GRANTS = "access_grants"
_INDEX = "ix_access_grants_principal_id"

#: The scopes of folders and the root that the actor's principals may view. ``{s}``: the
#: tenant's schema, qualified (a policy's names are resolved when it is created), or empty in
#: a function, whose search_path is pinned.
_FOLDER_SCOPES = (
    "SELECT g.scope_id FROM {s}access_grants g"
    " WHERE g.principal_id = ANY (CAST((SELECT {s}access_principals()) AS uuid[]))"
    " AND NOT g.on_document AND g.rights & 1 = 1"
)

#: Whether the actor's principals may view the document ``{row}id``, its own scope: one probe of
#: the primary key, row by row (``OFFSET 0``: not hashed into a set of every document scope).
_OWN_SCOPE = (
    "EXISTS (SELECT 1 FROM {s}access_grants g WHERE g.scope_id = {row}id"
    " AND g.principal_id = ANY (CAST((SELECT {s}access_principals()) AS uuid[]))"
    " AND g.rights & 1 = 1 OFFSET 0)"
)

_UNRESTRICTED = "(SELECT pg_trigger_depth() > 0 OR {s}access_system())"
_OWNED = "{row}owner_id = (SELECT {s}access_user())"

#: Visible: revision 0016's rule for folders, over the smaller set.
FOLDER_VISIBLE = f"{_UNRESTRICTED} OR {_OWNED} OR {{row}}access_scope IN ({_FOLDER_SCOPES})"

#: Visible: revision 0016's rule for documents, split by where the document's scope is.
DOCUMENT_VISIBLE = (
    f"{_UNRESTRICTED} OR {_OWNED}"
    f" OR ({{row}}access_scope <> {{row}}id AND {{row}}access_scope IN ({_FOLDER_SCOPES}))"
    f" OR ({{row}}access_scope = {{row}}id AND {_OWN_SCOPE})"
)

#: Citus refuses subqueries in a distributed table's policy: there each rule is a function of
#: the row's columns (as revision 0016's). (table, function, arguments, rule).
CITUS_RULES = (
    ("folders", "access_object_visible", "owner_id uuid, access_scope uuid", FOLDER_VISIBLE),
    (
        "documents",
        "access_document_row_visible",
        "id uuid, owner_id uuid, access_scope uuid",
        DOCUMENT_VISIBLE,
    ),
)

#: ``access_refresh`` marks the grants of a document's scope (revision 0016's text, the text now).
_REFRESH_CHANGES = (
    (
        "    wanted jsonb := '{}';\n",
        "    wanted jsonb := '{}';\n"
        "    on_document boolean := EXISTS (SELECT 1 FROM documents d WHERE d.id = scope);\n",
    ),
    (
        "INSERT INTO access_grants AS held (scope_id, principal_id, rights)\n"
        "        VALUES (scope, granted.principal::uuid, granted.rights)",
        "INSERT INTO access_grants AS held (scope_id, principal_id, rights, on_document)\n"
        "        VALUES (scope, granted.principal::uuid, granted.rights, on_document)",
    ),
)


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)


def _upgrade_tenant(schema: str) -> None:
    bind = op.get_bind()
    op.add_column(
        _GRANTS,
        sa.Column("on_document", sa.Boolean, server_default=sa.false(), nullable=False),
        schema=schema,
    )
    _mark_document_grants(schema)
    op.drop_index(_INDEX, _GRANTS, schema=schema)
    op.create_index(
        _INDEX, _GRANTS, ["principal_id", "on_document", "scope_id", "rights"], schema=schema
    )
    _create_refresh(schema, changed=True)
    create_functions(op.get_bind(), schema, _search_functions(changed=True), replace=True)
    if citus.is_citus(bind):
        for table, name, arguments, rule in CITUS_RULES:
            _create_rule_function(schema, name, arguments, rule)
            _replace_policy(schema, table, f"{{s}}.{name}({_columns(arguments)})")
    else:
        _replace_policy(schema, "folders", _qualified(FOLDER_VISIBLE))
        _replace_policy(schema, "documents", _qualified(DOCUMENT_VISIBLE))


def _downgrade_tenant(schema: str) -> None:
    bind = op.get_bind()
    previous = earlier_revision("0016")
    if citus.is_citus(bind):
        # 0016's policies on Citus all call access_object_visible(owner_id, access_scope).
        policy = previous._citus_policy(previous._OBJECT_VISIBLE)
        for table in ("folders", "documents"):
            _replace_policy(schema, table, policy)
        create_functions(op.get_bind(), schema, previous._citus_functions(schema)[:1], replace=True)
        _, name, arguments, _ = CITUS_RULES[1]
        drop_function(bind, schema, name, arguments=arguments)
    else:
        for table in ("folders", "documents"):
            _replace_policy(schema, table, previous._OBJECT_VISIBLE)
    create_functions(op.get_bind(), schema, _search_functions(changed=False), replace=True)
    _create_refresh(schema, changed=False)
    op.drop_index(_INDEX, _GRANTS, schema=schema)
    op.create_index(_INDEX, _GRANTS, ["principal_id", "scope_id", "rights"], schema=schema)
    op.drop_column(_GRANTS, "on_document", schema=schema)


def _mark_document_grants(schema: str) -> None:
    """Mark the grants of documents' scopes, past the rule that only triggers write grants."""
    bind = op.get_bind()
    table = (sql.Identifier(schema), sql.Identifier(_GRANTS))
    grants = sa.table(_GRANTS, sa.column("scope_id"), sa.column("on_document"), schema=schema)
    documents = sa.table("documents", sa.column("id"), schema=schema)
    # Dropped and created again, not disabled: the statements revision 0016 used, which Citus
    # passes on to the tenant's node.
    execute_ddl(bind, sql.SQL("DROP TRIGGER access_rules ON {}.{}").format(*table))
    # Every document, as a system principal would see them: the role that migrates may be
    # held to row-level security (the tables' owner is: it is forced).
    bind.execute(sa.select(sa.func.set_config("dms.actor", "system:migration 0019", True)))
    op.execute(
        sa.update(grants)
        .where(grants.c.scope_id.in_(sa.select(documents.c.id)))
        .values(on_document=True)
    )
    bind.execute(sa.select(sa.func.set_config("dms.actor", "", True)))
    execute_ddl(
        bind,
        sql.SQL(
            "CREATE TRIGGER access_rules BEFORE INSERT OR UPDATE OR DELETE ON {}.{}"
            " FOR EACH ROW EXECUTE FUNCTION {}.access_derived_only()"
        ).format(*table, sql.Identifier(schema)),
    )


def _create_refresh(schema: str, *, changed: bool) -> None:
    """Revision 0016's ``access_refresh``, with :data:`_REFRESH_CHANGES` or as it was."""
    previous = earlier_revision("0016")
    body = str(previous.REFRESH)
    for was, now in _REFRESH_CHANGES:
        if was not in body:
            raise RuntimeError("revision 0016's access_refresh has changed: update revision 0019")
        if changed:
            body = body.replace(was, now)
    (_name, arguments, returns, language, _body) = next(
        f for f in previous.FUNCTIONS if f[0] == "access_refresh"
    )
    create_functions(
        op.get_bind(),
        schema,
        [("access_refresh", arguments, returns, language, body)],
        replace=True,
    )


def _search_functions(*, changed: bool) -> tuple[FunctionSource, ...]:
    """Revision 0017's search functions, with the rule of this revision or as they were."""
    previous = earlier_revision("0017")
    if not changed:
        return tuple(previous.FUNCTIONS)
    now = "(\n    " + DOCUMENT_VISIBLE.format(s="", row="d.") + "\n)"
    functions = []
    for name, arguments, returns, language, body in previous.FUNCTIONS:
        if previous._VISIBLE not in body:
            raise RuntimeError(f"revision 0017's {name} has changed: update revision 0019")
        functions.append((name, arguments, returns, language, body.replace(previous._VISIBLE, now)))
    return tuple(functions)


def _create_rule_function(schema: str, name: str, arguments: str, rule: str) -> None:
    """A rule as a function of the row's columns, named by its arguments (for Citus)."""
    body = "SELECT " + rule.format(s="", row="")
    create_functions(
        op.get_bind(), schema, [(name, arguments, "boolean", "sql STABLE", body)], replace=True
    )


def _columns(arguments: str) -> str:
    return ", ".join(argument.split()[0] for argument in arguments.split(", "))


def _qualified(rule: str) -> str:
    """A rule as a policy's text: the tenant's names qualified, the row's columns bare."""
    return rule.format(s="{s}.", row="")


def _replace_policy(schema: str, table: str, condition: str) -> None:
    """Replace the table's policy ``access_visible`` (``{s}`` in ``condition``: the schema)."""
    bind = op.get_bind()
    name = (sql.Identifier(schema), sql.Identifier(table))
    # Dropped and created again rather than altered: the statements revision 0016 used, which
    # Citus passes on.
    execute_ddl(bind, sql.SQL("DROP POLICY access_visible ON {}.{}").format(*name))
    execute_ddl(
        bind,
        sql.SQL("CREATE POLICY access_visible ON {}.{} USING ({})").format(
            *name, sql.SQL(condition).format(s=sql.Identifier(schema))
        ),
    )
