"""Search rows carry their document's scope and owner: a search skips the matches its actor may
not view without reading their documents (docs/access.md, "Searching").

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07

Tenant only. ``search_visible_parts`` (revisions 0017, 0019, 0020) reads a word's matches from
the GIN index and looks each one's document up by primary key to decide whether the actor may
view it. A common word that a user may view half of cost that user twice the lookups of the
same search without access control (4,000 matches read for 2,000 ranked: 1.44x-1.67x,
bench/results/access.md), and a lookup is most of a match's cost.

* ``document_search.access_scope`` and ``owner_id``: the document's, copied when a search row
  is written (trigger ``search_access_row``) and whenever the document's change (trigger
  ``search_access_changed`` on ``documents``: a scope repointed, a folder or document moved
  into another scope, an owner changed or removed with their user). Filled here from
  ``documents``, as a system principal (1,000,000 rows: 37-61 s on the bench's
  machine, each row rewritten).
* The plain path of ``search_visible_parts`` keeps only the matches whose search row passes the
  same rule as the document would (its owner, its own scope, or a folder scope the actor may
  view) before it reads their documents, where the rule itself still decides: a search row
  that disagreed with its document could hide a document, never show one.
* ``access_user``, ``access_principals`` (revision 0016) and ``search_scope_share`` (0020) in
  PL/pgSQL, which keeps their plans for the session: as SQL functions with a pinned
  search_path (never inlined) each call was planned again, 174 µs for the principals, which
  every policy reads once or more per statement (18 µs now).
* The narrowed path (revision 0020) reads the matches of documents that are their own scope
  from a partial GIN index of their search rows (``ix_document_search_own_scope``), instead of
  looking up every document shared with the actor one by one (5,198 lookups for a user in a
  group named in 5,000 entries: 10-16 ms), and so no longer counts them to choose its path
  (``search_narrows``).

The downgrade puts the five functions back as they were and drops the index, the triggers,
their functions and the two columns.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from dms.migrations import MigrationScope
from dms.migrations.steps import earlier_revision
from dms.schema.ddl import (
    FunctionSource,
    create_functions,
    create_trigger,
    drop_functions,
    drop_trigger,
)

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | None = None
depends_on: str | None = None

_SEARCH = "document_search"

#: A new search row takes its document's scope and owner (inside a trigger: every document is
#: visible there, as to the other triggers that write search rows). The scope is left NULL for a
#: document that does not exist, so that the foreign key refuses the row (by its name), not a
#: NOT NULL constraint: it can never be stored so.
ACCESS_ROW = """
BEGIN
    SELECT d.access_scope, d.owner_id INTO NEW.access_scope, NEW.owner_id
      FROM documents d WHERE d.id = NEW.document_id;
    RETURN NEW;
END
"""

#: A document's new scope or owner goes to its search rows (one single-table statement with
#: values, which Citus routes to the tenant's node as revision 0010's triggers do).
ACCESS_CHANGED = """
BEGIN
    UPDATE document_search SET access_scope = NEW.access_scope, owner_id = NEW.owner_id
     WHERE document_id = NEW.id;
    RETURN NULL;
END
"""

FUNCTIONS: tuple[FunctionSource, ...] = (
    ("search_access_row", "", "trigger", "plpgsql", ACCESS_ROW),
    ("search_access_changed", "", "trigger", "plpgsql", ACCESS_CHANGED),
)

#: (trigger, timing and events, table, condition).
TRIGGERS = (
    ("search_access_row", "BEFORE INSERT", _SEARCH, None),
    (
        "search_access_changed",
        # folder_id too: a move sets the scope in a BEFORE trigger (access_rules), and a
        # trigger on columns fires only for those the statement itself sets.
        "AFTER UPDATE OF folder_id, access_scope, owner_id",
        "documents",
        "OLD.access_scope IS DISTINCT FROM NEW.access_scope"
        " OR OLD.owner_id IS DISTINCT FROM NEW.owner_id",
    ),
)

#: The search rows of documents that are their own scope, whose words the narrowed path reads
#: here instead of looking up every document shared with the actor one by one (5,198 lookups
#: of the primary key for a user in a group named in 5,000 entries: 10-16 ms).
OWN_SCOPE_INDEX = "ix_document_search_own_scope"

#: Revision 0020's choice without counting the documents shared one by one, which no longer
#: cost a lookup each.
CHOICE = """
BEGIN
    RETURN (SELECT share * greatest(c.reltuples, 0) / 125 + share * matches
              FROM pg_class c WHERE c.oid = 'documents'::regclass)
           < least(matches, max_rows / greatest(share, 1e-9));
END
"""

#: Revision 0016's acting user and principals in PL/pgSQL, which keeps a statement's plan for
#: the session: a SQL function that is not inlined (these are not, their search_path pinned)
#: is planned again at every call, and every policy and search reads the principals at least
#: once per statement (access_principals 174 µs a call as SQL, 18 µs as PL/pgSQL).
ACTING_USER = """
DECLARE
    actor text := coalesce(current_setting('dms.actor', true), '');
BEGIN
    IF actor = '' OR actor LIKE 'system:%' THEN
        RETURN NULL;
    END IF;
    RETURN actor::uuid;
END
"""
PRINCIPALS = """
DECLARE
    actor uuid := access_user();
BEGIN
    RETURN array_remove(ARRAY['{nil}'::uuid, actor], NULL)
        || array(SELECT m.group_id FROM access_group_members m WHERE m.user_id = actor);
END
"""

#: 0020's plain path's subqueries, which :func:`_passes` joins.
_PLAIN = " OFFSET 0) s JOIN documents d ON d.id = s.document_id"
_DECLARED = "    returned bigint;\n"


def _narrowed(filters: str, rank: str, visible: str) -> str:
    """The narrowed path's three queries for one combination of filters: the matches under
    the actor's folder scopes, then those of documents that are their own scope and of
    documents the actor owns, outside those folder scopes (each checked by the rule)."""

    def query(apart: str) -> str:
        return f"""
                RETURN QUERY
                    SELECT s.document_id, {rank}
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE {apart}
                       AND s.terms @@ q {filters} AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND {visible}
                     LIMIT max_rows - returned;"""

    owned = "SELECT o.id FROM documents o WHERE o.owner_id = (SELECT access_user())"
    return f"""{earlier_revision("0020").narrowed_by_scopes(filters, rank, visible)}
            IF max_rows IS NULL OR returned < max_rows THEN{query("s.access_scope = s.document_id")}
                GET DIAGNOSTICS found = ROW_COUNT;
                returned := returned + found;
            END IF;
            IF max_rows IS NULL OR returned < max_rows THEN{
        query(f"s.access_scope <> s.document_id AND s.document_id IN ({owned})")
    }
            END IF;"""


def upgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        return
    for column in _columns():
        op.add_column(_SEARCH, column, schema=scope.schema)
    _fill(scope.schema)
    create_functions(op.get_bind(), scope.schema, FUNCTIONS)
    for trigger, events, table, when in TRIGGERS:
        create_trigger(op.get_bind(), scope.schema, trigger, events=events, table=table, when=when)
    op.create_index(
        OWN_SCOPE_INDEX,
        _SEARCH,
        ["terms"],
        schema=scope.schema,
        postgresql_using="gin",
        postgresql_where=sa.text("access_scope = document_id"),
    )
    create_functions(op.get_bind(), scope.schema, _helpers(changed=True), replace=True)
    create_functions(op.get_bind(), scope.schema, [_parts(changed=True)], replace=True)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        return
    bind = op.get_bind()
    create_functions(bind, scope.schema, [_parts(changed=False)], replace=True)
    create_functions(bind, scope.schema, _helpers(changed=False), replace=True)
    op.drop_index(OWN_SCOPE_INDEX, _SEARCH, schema=scope.schema)
    for trigger, _events, table, _condition in reversed(TRIGGERS):
        drop_trigger(bind, scope.schema, trigger, table=table)
    drop_functions(bind, scope.schema, reversed(FUNCTIONS))
    for column in reversed(_columns()):
        op.drop_column(_SEARCH, column.name, schema=scope.schema)


def _columns() -> tuple[sa.Column[object], ...]:
    return (sa.Column("access_scope", sa.Uuid), sa.Column("owner_id", sa.Uuid))


def _fill(schema: str) -> None:
    """Every search row takes its document's scope and owner, as a system principal."""
    bind = op.get_bind()
    search = sa.table(
        _SEARCH,
        sa.column("document_id"),
        sa.column("access_scope"),
        sa.column("owner_id"),
        schema=schema,
    )
    documents = sa.table(
        "documents",
        sa.column("id"),
        sa.column("access_scope"),
        sa.column("owner_id"),
        schema=schema,
    )
    # The role that migrates may be held to row-level security (the tables' owner is: it is
    # forced): as a system principal it sees every row.
    bind.execute(sa.select(sa.func.set_config("dms.actor", "system:migration 0021", True)))
    op.execute(
        sa.update(search)
        .where(search.c.document_id == documents.c.id)
        .values(access_scope=documents.c.access_scope, owner_id=documents.c.owner_id)
    )
    bind.execute(sa.select(sa.func.set_config("dms.actor", "", True)))


def _helpers(*, changed: bool) -> list[FunctionSource]:
    """Revision 0016's acting user and principals and 0020's share and choice, with this
    revision's bodies or as they were."""
    first, previous = earlier_revision("0016"), earlier_revision("0020")
    was = {f[0]: f for f in (*first.FUNCTIONS, *previous.HELPERS)}
    names = ("access_user", "access_principals", "search_scope_share", "search_narrows")
    if not changed:
        return [was[name] for name in names]
    share = str(previous.SHARE).strip()
    now = {
        "access_user": ("plpgsql STABLE", ACTING_USER),
        "access_principals": ("plpgsql STABLE", PRINCIPALS.format(nil=first.NIL)),
        # PL/pgSQL for the same reason: pg_stats is a view of four catalogs, 1.2 ms to plan.
        "search_scope_share": ("plpgsql STABLE", f"BEGIN\n    RETURN ({share});\nEND"),
        "search_narrows": (was["search_narrows"][3], CHOICE),
    }
    return [(name, *was[name][1:3], *now[name]) for name in names]


def _passes() -> str:
    """What a search row must pass to be read further: revision 0019's rule for its document,
    written over the row's copies (owner, own scope, or a folder scope the actor views), so
    implied by the rule whenever the row agrees with its document."""
    rule = earlier_revision("0019")
    return (
        f"{rule._UNRESTRICTED.format(s='')} OR {rule._OWNED.format(s='', row='s.')}"
        " OR s.access_scope = s.document_id"
        f" OR s.access_scope IN ({rule._FOLDER_SCOPES.format(s='')})"
    )


def _parts(*, changed: bool) -> FunctionSource:
    """0020's ``search_visible_parts``, with this revision's reads or as it was."""
    previous = earlier_revision("0020")
    if not changed:
        return previous._parts(changed=True)  # type: ignore[no-any-return]
    name, arguments, returns, language, body = previous._parts(
        changed=True, narrowed_queries=_narrowed
    )
    for was, now, occurrences in (
        (_PLAIN, f" AND ({_passes()}){_PLAIN}", 4),
        (_DECLARED, f"{_DECLARED}    found bigint;\n", 1),
    ):
        if body.count(was) != occurrences:
            raise RuntimeError("revision 0020's search_visible_parts has changed: update 0021")
        body = body.replace(was, now)
    return (name, arguments, returns, language, body)
