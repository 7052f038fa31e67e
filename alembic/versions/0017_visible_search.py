"""Searches that keep their indexes under row-level security (docs/access.md, "Searching").

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

Tenant only. Under row-level security PostgreSQL evaluates a query's own conditions after the
policy's unless they are ``LEAKPROOF``, so none of them can be an index condition: the text
search's ``@@`` and the title's ``ILIKE`` are not leakproof, and a user's rare word read every
index row of the tenant, one policy check each (65x the time without access control at
1,000,000 documents, 3.5 s; bench/results/access.md). Two functions put the search's conditions and
the visibility together in one query, at one level, so that the GIN and trigram indexes serve
the words and the rule decides which of their rows the actor may see:

* ``search_visible_parts(q, in_order, within_all, within_any, max_rows)``: the index rows of
  live documents the actor may view that match ``q`` (and hold every id of ``within_all`` and
  one of ``within_any`` in ``filters``, migration 0010), each with its rank (revision 0009's
  ``ts_rank_cd`` over the part, plus 1,000 when it matches ``in_order``, the query's words
  next to each other), at most ``max_rows`` of them (NULL: all);
* ``search_visible_titles(pattern)``: the live documents the actor may view whose title is
  ``ILIKE pattern`` (escape character ``\\``).

Both are ``SECURITY DEFINER``: they run as the role that ran this migration, which must bypass
row-level security (a superuser, or a role with ``BYPASSRLS``) for the indexes to serve; under
another owner the policies apply inside as well and the result is the same, only slower. They
never rely on that owner: each writes out the visibility of revision 0016's policy on
``documents`` (a system principal, the owner, or a view grant on the row's scope), so a caller
sees through them exactly what the policies show it. The callers still read ``documents``
through the policies.

Revision 0010's ``search_filters`` is replaced by the same query in PL/pgSQL with its joins
pinned (:func:`_replace_search_filters`: a folder's move by a user read every folder twice per
document below it). The downgrade drops the two functions and puts 0010's back.
"""

from __future__ import annotations

from types import ModuleType

from alembic import op
from dms.migrations import MigrationScope
from dms.schema.ddl import FunctionSource, create_function, create_functions, drop_functions

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | None = None
depends_on: str | None = None

#: Revision 0016's visibility of a document ``d``: the scopes the actor may view are read once
#: per call and hashed (a user of the bench views 7,725: 1.5 ms), then looked up per candidate.
#: (A probe of ``pk_access_grants`` per candidate instead was faster for a rare word and seven
#: times slower for a common one that the user mostly may not see: 25,000 probes.)
_VISIBLE = """(
    (SELECT access_system())
    OR d.owner_id = (SELECT access_user())
    OR d.access_scope IN (
        SELECT g.scope_id FROM access_grants g
         WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[]))
           AND g.rights & 1 = 1)
)"""

#: A part's rank: cover density, plus 1,000 (more than any ``ts_rank_cd`` here reaches) when it
#: has the query's words next to each other, as typed (``in_order``; NULL: no such words).
_RANK = (
    "ts_rank_cd(s.terms, q, 1)::double precision"
    " + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END"
)


#: The index rows that match, in a subquery the planner keeps whole (``OFFSET 0``), so that the
#: GIN index yields them and each is joined to its document by primary key as it comes. Joined
#: freely, the planner would rather walk the visible documents and probe each one's index rows,
#: expecting most documents to be visible (it cannot know how few of a common word's matches a
#: user sees: 54,913 documents read to find 1,376, 420 ms).
_MATCHES = "(SELECT s.document_id, s.terms FROM document_search s WHERE s.terms @@ q {} OFFSET 0)"


def _parts_query(filters: str) -> str:
    return f"""
        RETURN QUERY
            SELECT s.document_id, {_RANK}
              FROM {_MATCHES.format(filters)} s JOIN documents d ON d.id = s.document_id
             WHERE d.deleted_at IS NULL AND {_VISIBLE}
             LIMIT max_rows;"""


#: A static query per combination of filters, so that each is planned with the GIN index on
#: ``(terms, filters)`` answering exactly the conditions it has (an empty array in ``@>`` would
#: make the index read every row's filters).
_PARTS = f"""
#variable_conflict use_column
BEGIN
    IF cardinality(within_all) = 0 AND cardinality(within_any) = 0 THEN{_parts_query("")}
    ELSIF cardinality(within_any) = 0 THEN{_parts_query("AND s.filters @> within_all")}
    ELSIF cardinality(within_all) = 0 THEN{_parts_query("AND s.filters && within_any")}
    ELSE{_parts_query("AND s.filters @> within_all AND s.filters && within_any")}
    END IF;
END
"""

_TITLES = f"""
SELECT d.id FROM documents d
 WHERE d.title ILIKE pattern ESCAPE '\\' AND d.deleted_at IS NULL AND {_VISIBLE}
"""

#: (name, arguments, returns, language, body), created in order, dropped in reverse. ``ROWS``:
#: what the planner expects of a call, which decides how the caller joins ``documents`` to it.
#: PostgreSQL's default (1,000) made it hash every visible document to join eight matches of a
#: rare word (357 ms against 11 ms by primary key); a search that finds thousands joins them by
#: primary key in milliseconds too.
FUNCTIONS: tuple[FunctionSource, ...] = (
    (
        "search_visible_parts",
        "q tsquery, in_order tsquery, within_all uuid[], within_any uuid[], max_rows integer",
        "TABLE (document_id uuid, rank double precision)",
        "plpgsql STABLE SECURITY DEFINER ROWS 100"
        # The matches joined to their documents by primary key, as they come (see _MATCHES),
        # not by walking both primary keys in step (given max_rows, the planner's choice for
        # a common word: 160,000 index rows read to find 2,000) nor by hashing every visible
        # document (its choice without max_rows).
        " SET enable_mergejoin = off SET enable_hashjoin = off",
        _PARTS,
    ),
    (
        "search_visible_titles",
        "pattern text",
        "SETOF uuid",
        "sql STABLE SECURITY DEFINER ROWS 100",
        _TITLES,
    ),
)


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        create_functions(op.get_bind(), scope.schema, FUNCTIONS)
        _replace_search_filters(scope.schema, in_plpgsql=True)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        return
    _replace_search_filters(scope.schema, in_plpgsql=False)
    drop_functions(op.get_bind(), scope.schema, reversed(FUNCTIONS))


def _replace_search_filters(schema: str, *, in_plpgsql: bool) -> None:
    """Revision 0010's ``search_filters`` with its join pinned (or back as it was).

    A folder's move recomputes the filters of every document below it, one call each. Under
    row-level security the planner costs a folder's primary key lookup with its policy's
    hashed set as if the set were built again for each lookup, so it walked the folders up by
    reading all of them, twice per call (3 ms: 30 s for a folder of 10,000 documents moved by
    a user, 1 s by a superuser). Hash and merge joins off leave the lookups by primary key; in
    PL/pgSQL, the query is planned once per session instead of at every call.
    """
    module: ModuleType = op.get_context().script.get_revision("0010").module  # type: ignore[union-attr]
    query = str(module.FILTERS).strip()
    if in_plpgsql:
        body = f"BEGIN\n    RETURN ({query});\nEND"
        language = "plpgsql STABLE SET enable_hashjoin = off SET enable_mergejoin = off"
    else:
        body, language = str(module.FILTERS), "sql STABLE"
    create_function(
        op.get_bind(),
        schema,
        "search_filters",
        arguments="doc uuid",
        returns="uuid[]",
        language=language,
        body=body,
        replace=True,
    )
