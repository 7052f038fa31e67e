"""A word that a user sees few documents of: the text index narrows its matches to the user's
folder scopes (docs/access.md, "Searching").

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07

Tenant only. ``search_visible_parts`` (revisions 0017 and 0019) reads a word's matches from the
GIN index and checks each one's document until it has ``max_rows`` the actor may view. Where
the actor may view few of them, it reads and checks them all: 25,000 matches for a user who sees
5 % of 1,000,000 documents, 246 ms, 6.3x the same search without access control
(bench/results/access.md). The search rows' ``filters`` hold every folder above their document,
and a document falls under the scope of one of those folders or of the root, or is a scope of
its own; so ``filters && <the actor's folder scopes>`` in the index condition yields every match
the actor may view through a folder (and a few more, checked as before), and the documents seen
as their own scope or as their owner's are looked up apart.

That narrowed path reads the posting lists of every folder scope the actor may view, which for a
rare word or a user who sees much costs more than the plain path (39 ms against 3 for a rare
word as the user who sees 50 %). So a call considers it only when the planner expects more
matches than the search ranks (``search_matches``: the plain path costs no more than the same
search without access control otherwise), and takes it when cheaper by estimates
(:data:`CHOICE`): the share of documents under the scopes from ``pg_stats``
(``search_scope_share``), the documents shared one by one with the actor counted. Without
statistics (a table never analyzed), on Citus (the search runs on the tenant's node, where an
EXPLAIN of its tables would switch the transaction's local execution), when the root's scope is
visible, and for a system principal the plain path runs, as before.

The downgrade puts 0019's ``search_visible_parts`` back and drops the three helpers.
"""

from __future__ import annotations

from collections.abc import Callable

from alembic import op
from dms.migrations import MigrationScope
from dms.migrations.steps import earlier_revision
from dms.schema.ddl import FunctionSource, create_functions, drop_functions

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | None = None
depends_on: str | None = None

NIL = "00000000-0000-0000-0000-000000000000"

#: The share of the tenant's documents whose scope is one of ``scopes``, from the statistics of
#: ``documents.access_scope``: the most common scopes' frequencies, and an even part of the rest
#: for each other scope. NULL when the column has no statistics (the caller then reads every
#: match as before). Statistics of a table under row-level security are shown to a role that
#: passes it: the search function's owner.
SHARE = """
SELECT mcv.common + greatest(1 - s.null_frac - coalesce(mcv.all_common, 0), 0)
       * (cardinality(scopes) - mcv.listed)
       / greatest(CASE WHEN s.n_distinct < 0 THEN -s.n_distinct * c.reltuples ELSE s.n_distinct END
                  - coalesce(cardinality(s.most_common_freqs), 0), 1)
  FROM pg_stats s
 CROSS JOIN pg_class c
 CROSS JOIN LATERAL (
       SELECT coalesce(sum(m.freq) FILTER (WHERE w.scope IS NOT NULL), 0) AS common,
              count(w.scope) AS listed, sum(m.freq) AS all_common
         FROM unnest(s.most_common_vals::text::uuid[], s.most_common_freqs) AS m (scope, freq)
         LEFT JOIN unnest(scopes) AS w (scope) ON w.scope = m.scope
       ) mcv
 WHERE s.schemaname = current_schema() AND s.tablename = 'documents'
   AND s.attname = 'access_scope' AND c.oid = 'documents'::regclass
"""

#: The number of index rows the planner expects ``q`` (within the filters) to match.
MATCHES = """
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT 1 FROM document_search s WHERE s.terms @@ $1'
        || CASE WHEN cardinality(within_all) > 0 THEN ' AND s.filters @> $2' ELSE '' END
        || CASE WHEN cardinality(within_any) > 0 THEN ' AND s.filters && $3' ELSE '' END
        INTO plan USING q, within_all, within_any;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
END
"""

#: Whether narrowing by ``scopes`` is the cheaper path for a word of ``matches`` rows, in
#: matches read and checked: the plain path reads matches until it has ``max_rows`` the actor
#: may view (all of them, if fewer); the narrowed one reads the scopes' posting lists (about
#: one match's work per 125 documents under them, measured: 12,526 rows narrowed from
#: 500,000 documents' postings in 66 ms), the matches under them, and looks up the documents
#: shared one by one (about a third of a match each).
CHOICE = """
DECLARE
    plain double precision := least(matches, max_rows / greatest(share, 1e-9));
    narrowed double precision;
BEGIN
    SELECT share * greatest(c.reltuples, 0) / 125 + share * matches INTO narrowed
      FROM pg_class c WHERE c.oid = 'documents'::regclass;
    IF narrowed >= plain THEN
        RETURN false;  -- without counting the documents apart, which only add
    END IF;
    RETURN narrowed + (SELECT count(*) FROM access_grants g
                        WHERE g.principal_id = ANY (access_principals()) AND g.on_document
                          AND g.rights & 1 = 1) / 3.0 < plain;
END
"""

#: The folder scopes (and the root's) the actor may view.
_SCOPES = (
    "SELECT DISTINCT g.scope_id FROM access_grants g"
    " WHERE g.principal_id = ANY (access_principals())"
    " AND NOT g.on_document AND g.rights & 1 = 1"
)

#: The documents the actor may view that no folder scope shows them: shared one by one, owned.
_APART = (
    "SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (access_principals())"
    " AND g.on_document AND g.rights & 1 = 1"
    " UNION SELECT o.id FROM documents o WHERE o.owner_id = (SELECT access_user())"
)

#: The tail of 0019's function, whose ``BEGIN`` the narrowed path goes after.
_ANCHOR = "#variable_conflict use_column\nBEGIN\n"


def narrowed_by_scopes(filters: str, rank: str, visible: str) -> str:
    """The narrowed path's first query: the matches under the actor's folder scopes (their
    number in ``returned``)."""
    return f"""
            RETURN QUERY
                SELECT s.document_id, {rank}
                  FROM (SELECT s.document_id, s.terms FROM document_search s
                         WHERE s.terms @@ q AND s.filters && scopes {filters} OFFSET 0) s
                  JOIN documents d ON d.id = s.document_id
                 WHERE d.deleted_at IS NULL AND {visible}
                 LIMIT max_rows;
            GET DIAGNOSTICS returned = ROW_COUNT;"""


def _narrowed(filters: str, rank: str, visible: str) -> str:
    """The two queries of the narrowed path for one combination of filters."""
    return f"""{narrowed_by_scopes(filters, rank, visible)}
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, {rank}
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.document_id IN ({_APART})
                       AND s.terms @@ q {filters} AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND {visible}
                     LIMIT max_rows - returned;
            END IF;"""


def parts_body(
    previous_body: str,
    rank: str,
    visible: str,
    narrowed_queries: Callable[[str, str, str], str] = _narrowed,
) -> str:
    """0019's ``search_visible_parts`` with the narrowed path before it."""
    if _ANCHOR not in previous_body:
        raise RuntimeError("revision 0019's search_visible_parts has changed: update 0020")
    narrowed = f"""#variable_conflict use_column
DECLARE
    scopes uuid[];
    share double precision;
    matches double precision;
    returned bigint;
BEGIN
    -- Only a word with more matches than the search ranks can cost a user more than the same
    -- search without access control, which stops at max_rows: the planner's estimate first
    -- (not on Citus, where the search runs on the tenant's node and an EXPLAIN of its tables
    -- would switch the transaction's local execution: the plain path there).
    IF max_rows IS NOT NULL AND NOT (SELECT pg_trigger_depth() > 0 OR access_system())
       AND NOT EXISTS (SELECT 1 FROM pg_extension e WHERE e.extname = 'citus') THEN
        matches := search_matches(q, within_all, within_any);
    END IF;
    IF matches > max_rows THEN
        scopes := array({_SCOPES});
        IF NOT '{NIL}'::uuid = ANY (scopes) THEN
            share := search_scope_share(scopes);
        END IF;
        IF share IS NOT NULL AND search_narrows(matches, max_rows, share) THEN
            IF cardinality(within_all) = 0 AND cardinality(within_any) = 0 THEN{
        narrowed_queries("", rank, visible)
    }
            ELSIF cardinality(within_any) = 0 THEN{
        narrowed_queries("AND s.filters @> within_all", rank, visible)
    }
            ELSIF cardinality(within_all) = 0 THEN{
        narrowed_queries("AND s.filters && within_any", rank, visible)
    }
            ELSE{
        narrowed_queries("AND s.filters @> within_all AND s.filters && within_any", rank, visible)
    }
            END IF;
            RETURN;
        END IF;
    END IF;
"""
    return previous_body.replace(_ANCHOR, narrowed, 1)


#: The helpers, created before the function that calls them and dropped after it.
HELPERS: tuple[FunctionSource, ...] = (
    ("search_scope_share", "scopes uuid[]", "double precision", "sql STABLE", SHARE),
    (
        "search_matches",
        "q tsquery, within_all uuid[], within_any uuid[]",
        "double precision",
        # VOLATILE: PostgreSQL runs no EXPLAIN in a function that promises not to write.
        "plpgsql VOLATILE",
        MATCHES,
    ),
    (
        "search_narrows",
        "matches double precision, max_rows integer, share double precision",
        "boolean",
        "plpgsql STABLE",
        CHOICE,
    ),
)


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        create_functions(op.get_bind(), scope.schema, HELPERS)
        create_functions(op.get_bind(), scope.schema, [_parts(changed=True)], replace=True)


def downgrade(*, scope: MigrationScope) -> None:
    if not scope.is_tenant:
        return
    create_functions(op.get_bind(), scope.schema, [_parts(changed=False)], replace=True)
    drop_functions(op.get_bind(), scope.schema, reversed(HELPERS))


def _parts(
    *, changed: bool, narrowed_queries: Callable[[str, str, str], str] = _narrowed
) -> FunctionSource:
    """0019's ``search_visible_parts``, with the narrowed path or as it was.

    ``narrowed_queries``: the narrowed path's queries for one combination of filters (revision
    0021 passes its own).
    """
    previous, first = earlier_revision("0019"), earlier_revision("0017")
    (name, arguments, returns, language, body), *_rest = previous._search_functions(changed=True)
    if not changed:
        return (name, arguments, returns, language, body)
    visible = "(\n    " + previous.DOCUMENT_VISIBLE.format(s="", row="d.") + "\n)"
    body = parts_body(body, first._RANK, visible, narrowed_queries)
    return (name, arguments, returns, language, body)
