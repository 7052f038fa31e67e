"""Access control: groups, owners and access entries inherited down the folder tree, enforced by
row-level security (docs/access.md tells the whole story).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

Tenant only.

* ``access_groups`` and ``access_group_members``: the tenant's groups of users (the IAM owns
  the users; the groups are the document system's).
* ``folders.owner_id`` and ``documents.owner_id``: the owner holds every right on the object
  itself. New objects are owned by the user who creates them; existing ones have no owner.
* ``access_entries``: a user, a group, or everyone (neither) is granted a set of rights (a bit
  mask: view 1, edit 2, delete 4, manage 8) on a folder, a document, or the tenant's root
  (neither). ``folders.inherits`` false stops a folder from inheriting what is granted above.
* Effective access, kept by triggers: a *scope* is the root, a folder that has entries or stops
  inheriting, or a document that has entries (``access_scopes``: each with the scope it
  inherits from). Every folder and document carries the scope it falls under
  (``access_scope``), and ``access_grants`` holds each scope's effective rights per principal
  (its own entries, with its parent scope's grants if it inherits). So what a user may view is
  a set of scopes, read once per statement, and a row is visible when its ``access_scope`` is in
  it: no walk up the tree per row. Moving a folder rewrites the scope of the rows below it
  that inherit from above; adding a member to a group rewrites nothing.
* Row-level security, enabled and forced on the folders, the documents and every table of
  their contents (revisions, texts, tags links, values, the search index, entries): a row is
  visible to its owner, to the principals granted view on its scope, and to a system principal
  (``dms.actor`` ``system:<name>``); the database's own triggers see everything. Rights beyond
  view are checked by ``access_*_rules`` triggers before each write, raising SQLSTATE 42501.

The upgrade grants everyone every right at the root, so a tenant behaves exactly as before
until someone changes its entries. The downgrade drops all of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import sqlalchemy as sa
from psycopg import sql

from alembic import op
from dms import citus
from dms.migrations import MigrationScope
from dms.schema.ddl import FunctionSource, create_functions, execute_ddl

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None

#: The root's scope, and the principal "everyone": the nil UUID.
NIL = "00000000-0000-0000-0000-000000000000"
#: The rights' bits; a right implies view, manage implies all.
VIEW, EDIT, DELETE, MANAGE = 1, 2, 4, 8

#: The user who acts (``dms.actor``), or NULL for a system principal or nobody.
ACTING_USER = """
SELECT CASE WHEN actor = '' OR actor LIKE 'system:%' THEN NULL ELSE actor::uuid END
  FROM (SELECT coalesce(current_setting('dms.actor', true), '') AS actor) named
"""

#: A named system principal acts: it holds every right, by name (the audit trail records it).
SYSTEM_ACTS = "SELECT coalesce(current_setting('dms.actor', true), '') LIKE 'system:%'"

#: Everyone, the acting user, and the groups the user is a member of.
PRINCIPALS = f"""
SELECT array_remove(ARRAY['{NIL}'::uuid, access_user()], NULL)
    || array(SELECT m.group_id FROM access_group_members m WHERE m.user_id = access_user())
"""

#: Whether the actor holds ``wanted`` on an object of ``scope`` owned by ``owner``.
ALLOWS = """
SELECT access_system()
    OR coalesce(owner = access_user(), false)
    OR EXISTS (
        SELECT 1 FROM access_grants g
         WHERE g.scope_id = scope AND g.principal_id = ANY (access_principals())
           AND g.rights & wanted = wanted)
"""

#: Raise 42501 unless the actor holds ``wanted`` on the object.
REQUIRE = """
BEGIN
    IF NOT access_allows(scope, owner, wanted) THEN
        RAISE EXCEPTION 'permission denied: % on %', what, object_name
            USING ERRCODE = '42501', DETAIL = format('actor %s',
                coalesce(nullif(current_setting('dms.actor', true), ''), 'nobody'));
    END IF;
END
"""

#: Raise 42501 unless the actor holds ``wanted`` on ``folder`` (the root for none). A folder
#: that does not exist is left to the foreign key, which says so (NotFound, not a refusal).
REQUIRE_IN_FOLDER = """
BEGIN
    IF folder IS NOT NULL AND NOT EXISTS (SELECT 1 FROM folders f WHERE f.id = folder) THEN
        RETURN;
    END IF;
    PERFORM access_require(access_folder_scope(folder), access_folder_owner(folder), wanted,
                           access_right_names(wanted), coalesce('folder ' || folder, 'the root'));
END
"""

#: The scope a new object under ``folder`` falls under (the root's for none).
FOLDER_SCOPE = f"""
SELECT coalesce((SELECT f.access_scope FROM folders f WHERE f.id = folder), '{NIL}'::uuid)
"""

#: The owner of ``folder`` (none for the root).
FOLDER_OWNER = "SELECT f.owner_id FROM folders f WHERE f.id = folder"

#: The names of the rights a mask asks for, for messages.
RIGHT_NAMES = f"""
SELECT array_to_string(array_remove(ARRAY[
    CASE WHEN wanted & {MANAGE} <> 0 THEN 'manage' END,
    CASE WHEN wanted & {DELETE} <> 0 THEN 'delete' END,
    CASE WHEN wanted & {EDIT} <> 0 THEN 'edit' END,
    CASE WHEN wanted & {VIEW} <> 0 AND wanted = {VIEW} THEN 'view' END
], NULL), ' and ')
"""

#: A user that a row names is added to ``known_users`` first (as trigger known_users_enlist
#: does for the older columns).
ENLIST = """
BEGIN
    IF person IS NOT NULL THEN
        INSERT INTO known_users (id) VALUES (person) ON CONFLICT (id) DO NOTHING;
    END IF;
END
"""

#: Recompute a scope's grants, then those of the scopes that inherit from it: its own entries,
#: with its parent's grants if it inherits, each principal's rights or-ed together. Only what
#: changed is written (a refresh reaches every scope below, and a rewrite of their unchanged
#: grants would leave dead rows for every later read of the grants to step over). Row by row,
#: in single-table statements: on Citus an INSERT ... SELECT fails here for an ordinary role
#: (from a table under row-level security, Citus 13.2 deparses its shard query wrongly; from
#: arrays, it inserts nothing).
REFRESH = f"""
DECLARE
    parent uuid;
    inheriting boolean;
    child uuid;
    granted record;
    wanted jsonb := '{{}}';
BEGIN
    SELECT s.parent_id, s.inherits INTO parent, inheriting FROM access_scopes s WHERE s.id = scope;
    FOR granted IN
        SELECT coalesce(e.user_id, e.group_id, '{NIL}'::uuid)::text AS principal, e.rights
          FROM access_entries e
         WHERE e.folder_id = scope OR e.document_id = scope
            OR (scope = '{NIL}'::uuid AND e.folder_id IS NULL AND e.document_id IS NULL)
    LOOP
        wanted := wanted || jsonb_build_object(
            granted.principal, coalesce((wanted ->> granted.principal)::int, 0) | granted.rights);
    END LOOP;
    IF inheriting THEN
        FOR granted IN
            SELECT g.principal_id::text AS principal, g.rights FROM access_grants g
             WHERE g.scope_id = parent
        LOOP
            wanted := wanted || jsonb_build_object(granted.principal,
                coalesce((wanted ->> granted.principal)::int, 0) | granted.rights);
        END LOOP;
    END IF;
    DELETE FROM access_grants g WHERE g.scope_id = scope AND NOT wanted ? g.principal_id::text;
    FOR granted IN
        SELECT w.key AS principal, w.value::smallint AS rights FROM jsonb_each_text(wanted) w
    LOOP
        INSERT INTO access_grants AS held (scope_id, principal_id, rights)
        VALUES (scope, granted.principal::uuid, granted.rights)
        ON CONFLICT (scope_id, principal_id) DO UPDATE SET rights = excluded.rights
         WHERE held.rights <> excluded.rights;
    END LOOP;
    FOR child IN SELECT s.id FROM access_scopes s WHERE s.parent_id = scope AND s.inherits LOOP
        PERFORM access_refresh(child);
    END LOOP;
END
"""

#: Point the rows under ``folder`` (itself included) that fall under ``old_scope`` to
#: ``new_scope``, and the scopes below it that inherited from ``old_scope``. Single-table
#: statements with array values, for Citus (as revision 0010's triggers).
REPOINT = """
DECLARE
    below uuid[];
    scoped_documents uuid[];
    child uuid;
BEGIN
    below := array(
        WITH RECURSIVE subtree (id) AS (
            SELECT folder
            UNION
            SELECT f.id FROM folders f JOIN subtree ON f.parent_id = subtree.id
        )
        SELECT id FROM subtree
    );
    UPDATE folders SET access_scope = new_scope
     WHERE id = ANY (below) AND access_scope = old_scope;
    UPDATE documents SET access_scope = new_scope
     WHERE folder_id = ANY (below) AND access_scope = old_scope;
    scoped_documents := array(
        SELECT d.id FROM documents d WHERE d.folder_id = ANY (below) AND d.access_scope = d.id
    );
    FOR child IN
        UPDATE access_scopes SET parent_id = new_scope
         WHERE parent_id = old_scope AND id <> new_scope
           AND (id = ANY (below) OR id = ANY (scoped_documents))
        RETURNING id
    LOOP
        PERFORM access_refresh(child);
    END LOOP;
END
"""

#: Make a folder a scope of its own (it got entries, or stops inheriting).
FOLDER_BECOMES_SCOPE = """
DECLARE
    folder_row folders;
BEGIN
    SELECT * INTO folder_row FROM folders WHERE id = folder;
    IF NOT FOUND OR folder_row.access_scope = folder THEN
        RETURN;
    END IF;
    INSERT INTO access_scopes (id, parent_id, inherits)
    VALUES (folder, folder_row.access_scope, folder_row.inherits);
    PERFORM access_repoint(folder, folder_row.access_scope, folder);
    PERFORM access_refresh(folder);
END
"""

#: Make a document a scope of its own (it got entries).
DOCUMENT_BECOMES_SCOPE = """
DECLARE
    old_scope uuid;
BEGIN
    SELECT d.access_scope INTO old_scope FROM documents d WHERE d.id = doc;
    IF NOT FOUND OR old_scope = doc THEN
        RETURN;
    END IF;
    INSERT INTO access_scopes (id, parent_id, inherits) VALUES (doc, old_scope, true);
    UPDATE documents SET access_scope = doc WHERE id = doc;
    PERFORM access_refresh(doc);
END
"""

#: Before a folder is written: place it, enlist its owner, and check the actor's rights
#: (a direct statement only: the database's own triggers act at a depth above 1).
FOLDER_RULES = f"""
DECLARE
    direct boolean := pg_trigger_depth() = 1;
    wanted integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF direct THEN
            PERFORM access_require(OLD.access_scope, OLD.owner_id, {DELETE},
                                   'delete', 'folder ' || OLD.id);
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.owner_id := coalesce(NEW.owner_id, access_user());
        PERFORM access_enlist(NEW.owner_id);
        NEW.access_scope := CASE WHEN NEW.inherits THEN access_folder_scope(NEW.parent_id)
                                 ELSE NEW.id END;
        IF direct THEN
            PERFORM access_require_in_folder(NEW.parent_id, {EDIT});
        END IF;
        RETURN NEW;
    END IF;
    IF NOT direct THEN
        RETURN NEW;
    END IF;
    PERFORM access_enlist(NEW.owner_id);
    NEW.access_scope := OLD.access_scope;
    wanted := CASE WHEN NEW.deleted_at IS DISTINCT FROM OLD.deleted_at THEN {DELETE} ELSE {EDIT} END
            | CASE WHEN NEW.owner_id IS DISTINCT FROM OLD.owner_id
                     OR NEW.inherits IS DISTINCT FROM OLD.inherits THEN {MANAGE} ELSE 0 END;
    PERFORM access_require(OLD.access_scope, OLD.owner_id, wanted,
                           access_right_names(wanted), 'folder ' || OLD.id);
    IF NEW.parent_id IS DISTINCT FROM OLD.parent_id THEN
        PERFORM access_require_in_folder(NEW.parent_id, {EDIT});
        IF OLD.access_scope <> OLD.id THEN
            NEW.access_scope := access_folder_scope(NEW.parent_id);
        END IF;
    END IF;
    -- A folder that stops inheriting becomes a scope after the row is written
    -- (access_folder_changed), with the rows below it.
    RETURN NEW;
END
"""

#: After a folder is inserted, moved, or its inheritance switched: keep scopes and grants.
FOLDER_CHANGED = """
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.access_scope = NEW.id THEN
            INSERT INTO access_scopes (id, parent_id, inherits)
            VALUES (NEW.id, access_folder_scope(NEW.parent_id), NEW.inherits);
            PERFORM access_refresh(NEW.id);
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.access_scope = NEW.id THEN
        UPDATE access_scopes SET parent_id = access_folder_scope(NEW.parent_id),
                                 inherits = NEW.inherits
         WHERE id = NEW.id;
        PERFORM access_refresh(NEW.id);
    ELSE
        IF NEW.access_scope IS DISTINCT FROM OLD.access_scope THEN
            PERFORM access_repoint(NEW.id, OLD.access_scope, NEW.access_scope);
        END IF;
        IF NEW.inherits IS DISTINCT FROM OLD.inherits THEN
            PERFORM access_folder_becomes_scope(NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END
"""

#: Before a document is written: place it, enlist its owner, check the actor's rights.
DOCUMENT_RULES = f"""
DECLARE
    direct boolean := pg_trigger_depth() = 1;
    wanted integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF direct THEN
            PERFORM access_require(OLD.access_scope, OLD.owner_id, {DELETE},
                                   'delete', 'document ' || OLD.id);
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.owner_id := coalesce(NEW.owner_id, access_user());
        PERFORM access_enlist(NEW.owner_id);
        NEW.access_scope := access_folder_scope(NEW.folder_id);
        IF direct THEN
            PERFORM access_require_in_folder(NEW.folder_id, {EDIT});
        END IF;
        RETURN NEW;
    END IF;
    IF NOT direct THEN
        RETURN NEW;
    END IF;
    PERFORM access_enlist(NEW.owner_id);
    NEW.access_scope := OLD.access_scope;
    wanted := CASE WHEN NEW.deleted_at IS DISTINCT FROM OLD.deleted_at THEN {DELETE} ELSE {EDIT} END
            | CASE WHEN NEW.owner_id IS DISTINCT FROM OLD.owner_id THEN {MANAGE} ELSE 0 END;
    PERFORM access_require(OLD.access_scope, OLD.owner_id, wanted,
                           access_right_names(wanted), 'document ' || OLD.id);
    IF NEW.folder_id IS DISTINCT FROM OLD.folder_id THEN
        PERFORM access_require_in_folder(NEW.folder_id, {EDIT});
        IF OLD.access_scope <> OLD.id THEN
            NEW.access_scope := access_folder_scope(NEW.folder_id);
        END IF;
    END IF;
    RETURN NEW;
END
"""

#: After a document with entries of its own moves: its scope inherits from its new folder's.
DOCUMENT_MOVED = """
BEGIN
    IF NEW.access_scope = NEW.id THEN
        UPDATE access_scopes SET parent_id = access_folder_scope(NEW.folder_id) WHERE id = NEW.id;
        PERFORM access_refresh(NEW.id);
    END IF;
    RETURN NULL;
END
"""

#: A folder or document deleted for good takes its scope (and grants) with it.
OBJECT_DELETED = """
BEGIN
    DELETE FROM access_scopes WHERE id = OLD.id;
    RETURN NULL;
END
"""

#: Before a row that belongs to a document (a revision, a tag link, a value, a text) is
#: written: the actor needs edit on the document. TG_ARGV[0] names the column that leads to the
#: document: ``document_id``, or ``revision_id`` (through the revision).
CONTENT_RULES = f"""
DECLARE
    written jsonb := to_jsonb(coalesce(NEW, OLD));
    doc uuid;
    doc_scope uuid;
    doc_owner uuid;
BEGIN
    IF pg_trigger_depth() > 1 OR access_system() THEN
        RETURN coalesce(NEW, OLD);
    END IF;
    IF TG_ARGV[0] = 'revision_id' THEN
        SELECT r.document_id INTO doc FROM file_revisions r
         WHERE r.id = (written ->> 'revision_id')::uuid;
    ELSE
        doc := (written ->> 'document_id')::uuid;
    END IF;
    SELECT d.access_scope, d.owner_id INTO doc_scope, doc_owner FROM documents d WHERE d.id = doc;
    IF FOUND THEN
        PERFORM access_require(doc_scope, doc_owner, {EDIT}, 'edit', 'document ' || doc);
    END IF;
    RETURN coalesce(NEW, OLD);
END
"""

#: Before an entry is written: the actor needs manage on its object (the root's for neither).
ENTRY_RULES = f"""
DECLARE
    entry access_entries := coalesce(NEW, OLD);
    object_scope uuid := '{NIL}'::uuid;
    object_owner uuid;
BEGIN
    IF TG_OP <> 'DELETE' THEN
        PERFORM access_enlist(NEW.user_id);
    END IF;
    IF pg_trigger_depth() > 1 OR access_system() THEN
        RETURN coalesce(NEW, OLD);
    END IF;
    IF entry.folder_id IS NOT NULL THEN
        SELECT f.access_scope, f.owner_id INTO object_scope, object_owner
          FROM folders f WHERE f.id = entry.folder_id;
    ELSIF entry.document_id IS NOT NULL THEN
        SELECT d.access_scope, d.owner_id INTO object_scope, object_owner
          FROM documents d WHERE d.id = entry.document_id;
    END IF;
    IF object_scope IS NULL THEN
        RETURN coalesce(NEW, OLD);  -- no such object: the foreign key says so
    END IF;
    PERFORM access_require(object_scope, object_owner, {MANAGE}, 'manage',
        coalesce('folder ' || entry.folder_id, 'document ' || entry.document_id, 'the root'));
    RETURN coalesce(NEW, OLD);
END
"""

#: After an entry is written: its object becomes a scope if it was not, and its grants (and
#: those inheriting from them) are recomputed. An object deleted for good is skipped.
ENTRY_CHANGED = f"""
DECLARE
    entry access_entries;
BEGIN
    FOREACH entry IN ARRAY array_remove(ARRAY[OLD, NEW], NULL) LOOP
        IF entry.folder_id IS NOT NULL THEN
            PERFORM access_folder_becomes_scope(entry.folder_id);
            IF EXISTS (SELECT 1 FROM access_scopes s WHERE s.id = entry.folder_id) THEN
                PERFORM access_refresh(entry.folder_id);
            END IF;
        ELSIF entry.document_id IS NOT NULL THEN
            PERFORM access_document_becomes_scope(entry.document_id);
            IF EXISTS (SELECT 1 FROM access_scopes s WHERE s.id = entry.document_id) THEN
                PERFORM access_refresh(entry.document_id);
            END IF;
        ELSE
            PERFORM access_refresh('{NIL}'::uuid);
        END IF;
    END LOOP;
    RETURN NULL;
END
"""

#: Groups and memberships are the tenant's: changing them needs manage on the root (and so does
#: deleting a tag, field or option: see TRIGGERS). A trigger
#: argument names the column of a user to enlist (not TG_TABLE_NAME: on Citus the trigger runs
#: on a shard, whose table has another name).
ROOT_RULES = f"""
BEGIN
    IF TG_NARGS > 0 AND TG_OP <> 'DELETE' THEN
        PERFORM access_enlist((to_jsonb(NEW) ->> TG_ARGV[0])::uuid);
    END IF;
    IF pg_trigger_depth() = 1 THEN
        PERFORM access_require('{NIL}'::uuid, NULL, {MANAGE}, 'manage', 'the root');
    END IF;
    RETURN coalesce(NEW, OLD);
END
"""

#: Scopes and grants are derived: only the triggers write them.
DERIVED_ONLY = """
BEGIN
    IF pg_trigger_depth() = 1 THEN
        RAISE EXCEPTION '% is kept by the database: write access_entries instead', TG_TABLE_NAME
            USING ERRCODE = '42501';
    END IF;
    RETURN coalesce(NEW, OLD);
END
"""

#: (name, arguments, returns, language, body), created in order, dropped in reverse.
FUNCTIONS: tuple[FunctionSource, ...] = (
    ("access_user", "", "uuid", "sql STABLE", ACTING_USER),
    ("access_system", "", "boolean", "sql STABLE", SYSTEM_ACTS),
    ("access_principals", "", "uuid[]", "sql STABLE", PRINCIPALS),
    ("access_allows", "scope uuid, owner uuid, wanted integer", "boolean", "sql STABLE", ALLOWS),
    ("access_right_names", "wanted integer", "text", "sql IMMUTABLE", RIGHT_NAMES),
    (
        "access_require",
        "scope uuid, owner uuid, wanted integer, what text, object_name text",
        "void",
        "plpgsql STABLE",
        REQUIRE,
    ),
    ("access_folder_scope", "folder uuid", "uuid", "sql STABLE", FOLDER_SCOPE),
    ("access_folder_owner", "folder uuid", "uuid", "sql STABLE", FOLDER_OWNER),
    (
        "access_require_in_folder",
        "folder uuid, wanted integer",
        "void",
        "plpgsql STABLE",
        REQUIRE_IN_FOLDER,
    ),
    ("access_enlist", "person uuid", "void", "plpgsql", ENLIST),
    ("access_refresh", "scope uuid", "void", "plpgsql", REFRESH),
    ("access_repoint", "folder uuid, old_scope uuid, new_scope uuid", "void", "plpgsql", REPOINT),
    ("access_folder_becomes_scope", "folder uuid", "void", "plpgsql", FOLDER_BECOMES_SCOPE),
    ("access_document_becomes_scope", "doc uuid", "void", "plpgsql", DOCUMENT_BECOMES_SCOPE),
    ("access_folder_rules", "", "trigger", "plpgsql", FOLDER_RULES),
    ("access_folder_changed", "", "trigger", "plpgsql", FOLDER_CHANGED),
    ("access_document_rules", "", "trigger", "plpgsql", DOCUMENT_RULES),
    ("access_document_moved", "", "trigger", "plpgsql", DOCUMENT_MOVED),
    ("access_object_deleted", "", "trigger", "plpgsql", OBJECT_DELETED),
    ("access_content_rules", "", "trigger", "plpgsql", CONTENT_RULES),
    ("access_entry_rules", "", "trigger", "plpgsql", ENTRY_RULES),
    ("access_entry_changed", "", "trigger", "plpgsql", ENTRY_CHANGED),
    ("access_root_rules", "", "trigger", "plpgsql", ROOT_RULES),
    ("access_derived_only", "", "trigger", "plpgsql", DERIVED_ONLY),
)

_ANY_WRITE = "INSERT OR UPDATE OR DELETE"

#: (trigger, table, timing and events, condition, function, argument).
TRIGGERS: tuple[tuple[str, str, str, str | None, str, tuple[str, ...]], ...] = (
    ("access_rules", "folders", f"BEFORE {_ANY_WRITE}", None, "access_folder_rules", ()),
    ("access_placed", "folders", "AFTER INSERT", None, "access_folder_changed", ()),
    (
        "access_moved",
        "folders",
        "AFTER UPDATE OF parent_id, inherits",
        "OLD.parent_id IS DISTINCT FROM NEW.parent_id"
        " OR OLD.inherits IS DISTINCT FROM NEW.inherits",
        "access_folder_changed",
        (),
    ),
    ("access_deleted", "folders", "AFTER DELETE", None, "access_object_deleted", ()),
    ("access_rules", "documents", f"BEFORE {_ANY_WRITE}", None, "access_document_rules", ()),
    (
        "access_moved",
        "documents",
        "AFTER UPDATE OF folder_id",
        "OLD.folder_id IS DISTINCT FROM NEW.folder_id",
        "access_document_moved",
        (),
    ),
    ("access_deleted", "documents", "AFTER DELETE", None, "access_object_deleted", ()),
    *(
        ("access_rules", table, f"BEFORE {_ANY_WRITE}", None, "access_content_rules", (column,))
        for table, column in (
            ("file_revisions", "document_id"),
            ("document_tags", "document_id"),
            ("document_metadata", "document_id"),
            ("document_metadata_choices", "document_id"),
            ("revision_texts", "revision_id"),
            ("revision_text_parts", "revision_id"),
        )
    ),
    ("access_rules", "access_entries", f"BEFORE {_ANY_WRITE}", None, "access_entry_rules", ()),
    ("access_changed", "access_entries", f"AFTER {_ANY_WRITE}", None, "access_entry_changed", ()),
    ("access_rules", "access_groups", f"BEFORE {_ANY_WRITE}", None, "access_root_rules", ()),
    (
        "access_rules",
        "access_group_members",
        f"BEFORE {_ANY_WRITE}",
        None,
        "access_root_rules",
        ("user_id",),
    ),
    # Deleting a tag, a field or an option reaches into every document that uses it, seen or
    # not: it needs manage at the root. Adding and renaming them is anyone's.
    *(
        ("access_rules", table, "BEFORE DELETE", None, "access_root_rules", ())
        for table in ("tags", "metadata_fields", "metadata_field_options")
    ),
    # The audit trail records who granted and revoked what (revision 0013's audit_row).
    *(
        ("audit_row", table, f"AFTER {_ANY_WRITE}", None, "audit_row", arguments)
        for table, arguments in (
            ("access_entries", ("access_entry", "document_id")),
            ("access_groups", ("group", "")),
            ("access_group_members", ("group_member", "")),
        )
    ),
    ("access_rules", "access_scopes", f"BEFORE {_ANY_WRITE}", None, "access_derived_only", ()),
    ("access_rules", "access_grants", f"BEFORE {_ANY_WRITE}", None, "access_derived_only", ()),
)

#: Who sees everything: the database's own triggers, and a named system principal. One
#: uncorrelated subquery, so it is evaluated once per statement. ``{s}`` is the tenant's schema:
#: a policy's names are resolved when it is created, so they are qualified.
_UNRESTRICTED = "(SELECT pg_trigger_depth() > 0 OR {s}.access_system())"

#: Visible: its owner, the principals granted view on its scope. The scopes are read once per
#: statement (a hashed subplan over an index read of ``access_grants`` for the actor's
#: principals, themselves an init plan); written out here rather than in a function, which
#: PostgreSQL would run as an opaque call (its search_path pinned) and not plan with the query.
_OBJECT_VISIBLE = (
    f"{_UNRESTRICTED} OR owner_id = (SELECT {{s}}.access_user())"
    " OR access_scope IN (SELECT g.scope_id FROM {s}.access_grants g"
    " WHERE g.principal_id = ANY (CAST((SELECT {s}.access_principals()) AS uuid[]))"
    f" AND g.rights & {VIEW} = {VIEW})"
)
_DOCUMENT_VISIBLE = (
    f"{_UNRESTRICTED} OR EXISTS (SELECT 1 FROM {{s}}.documents d WHERE d.id = document_id)"
)
_REVISION_VISIBLE = (
    f"{_UNRESTRICTED} OR EXISTS (SELECT 1 FROM {{s}}.file_revisions r WHERE r.id = revision_id)"
)
_ENTRY_VISIBLE = (
    f"{_UNRESTRICTED} OR (folder_id IS NULL AND document_id IS NULL)"
    " OR EXISTS (SELECT 1 FROM {s}.folders f WHERE f.id = folder_id)"
    " OR EXISTS (SELECT 1 FROM {s}.documents d WHERE d.id = document_id)"
)

#: An event of the audit trail shows what it was about: it is visible with its document, folder
#: or access entry; events of the tenant's vocabulary (tags, fields, options) and of its groups
#: are visible to all.
_EVENT_VISIBLE = (
    f"{_UNRESTRICTED}"
    " OR (document_id IS NULL AND object_type NOT IN ('folder', 'access_entry'))"
    " OR EXISTS (SELECT 1 FROM {s}.documents d WHERE d.id = document_id)"
    " OR (object_type = 'folder' AND EXISTS (SELECT 1 FROM {s}.folders f WHERE f.id = object_id))"
    " OR (object_type = 'access_entry'"
    " AND EXISTS (SELECT 1 FROM {s}.access_entries e WHERE e.id = object_id))"
)

#: (table, the condition under which a row is visible) of every table under row-level security.
POLICIES = (
    ("folders", _OBJECT_VISIBLE),
    ("documents", _OBJECT_VISIBLE),
    ("file_revisions", _DOCUMENT_VISIBLE),
    ("document_tags", _DOCUMENT_VISIBLE),
    ("document_metadata", _DOCUMENT_VISIBLE),
    ("document_metadata_choices", _DOCUMENT_VISIBLE),
    ("document_search", _DOCUMENT_VISIBLE),
    ("revision_texts", _REVISION_VISIBLE),
    ("revision_text_parts", _REVISION_VISIBLE),
    ("access_entries", _ENTRY_VISIBLE),
    ("audit_events", _EVENT_VISIBLE),
)

#: Citus refuses subqueries in the policies of distributed tables (a policy's expression must
#: be evaluable on its own on the node of a shard), so there each condition above is one
#: function of the row's columns: the same rule, evaluated row by row instead of once per
#: statement (docs/access.md says what that costs). (name, arguments, the condition above).
CITUS_CONDITIONS = {
    _OBJECT_VISIBLE: ("access_object_visible", "owner_id uuid, access_scope uuid"),
    _DOCUMENT_VISIBLE: ("access_document_visible", "document_id uuid"),
    _REVISION_VISIBLE: ("access_revision_visible", "revision_id uuid"),
    _ENTRY_VISIBLE: ("access_entry_visible", "folder_id uuid, document_id uuid"),
    _EVENT_VISIBLE: ("access_event_visible", "object_type text, object_id uuid, document_id uuid"),
}


def _citus_functions(schema: str) -> tuple[FunctionSource, ...]:
    """The conditions as functions: the columns they read become the arguments' names."""
    quoted = '"' + schema + '"'  # a tenant schema's name never holds a double quote
    return tuple(
        (name, arguments, "boolean", "sql STABLE", "SELECT " + visible.format(s=quoted))
        for visible, (name, arguments) in CITUS_CONDITIONS.items()
    )


def _citus_policy(visible: str) -> str:
    name, arguments = CITUS_CONDITIONS[visible]
    columns = ", ".join(argument.split()[0] for argument in arguments.split(", "))
    return f"{{s}}.{name}({columns})"


#: How revision 0013's ``audit_row`` reads from here on, as (its text, the text now): an update
#: ignores the scope (derived, rewritten for every row below a moved folder: recording it would
#: flood the trail with non-changes), and a membership's object is its group.
_AUDIT_ROW_CHANGES = (
    ("o.key <> 'updated_at'", "o.key NOT IN ('updated_at', 'access_scope')"),
    (
        "coalesce(row_now ->> 'id', row_now ->> 'field_id')",
        "coalesce(row_now ->> 'id', row_now ->> 'field_id', row_now ->> 'group_id')",
    ),
)


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _upgrade_tenant(scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _downgrade_tenant(scope.schema)


def _upgrade_tenant(schema: str) -> None:
    _create_tables(schema)
    _add_columns(schema)
    _grant_everyone_everything(schema)
    bind = op.get_bind()
    create_functions(bind, schema, FUNCTIONS)
    for statement in _create_triggers(schema):
        execute_ddl(bind, statement)
    _replace_audit_row(schema, changed=True)
    on_citus = citus.is_citus(bind)
    if on_citus:
        create_functions(bind, schema, _citus_functions(schema))
    for table, visible in POLICIES:
        condition = _citus_policy(visible) if on_citus else visible
        for statement in _secure(schema, table, condition):
            execute_ddl(bind, statement)


def _grant_everyone_everything(schema: str) -> None:
    """The root's scope, with everyone holding every right there, written before the triggers
    that would ask who grants it: the tenant behaves as it did until its entries change."""
    every_right = VIEW | EDIT | DELETE | MANAGE
    nil = sa.text(f"'{NIL}'::uuid")
    op.execute(
        sa.insert(
            sa.table("access_scopes", sa.column("id"), sa.column("inherits"), schema=schema)
        ).values(id=nil, inherits=False)
    )
    op.execute(
        sa.insert(sa.table("access_entries", sa.column("rights"), schema=schema)).values(
            rights=every_right
        )
    )
    grants = sa.table(
        "access_grants",
        sa.column("scope_id"),
        sa.column("principal_id"),
        sa.column("rights"),
        schema=schema,
    )
    op.execute(sa.insert(grants).values(scope_id=nil, principal_id=nil, rights=every_right))


def _downgrade_tenant(schema: str) -> None:
    bind = op.get_bind()
    for table, _visible in POLICIES:
        execute_ddl(
            bind,
            sql.SQL("DROP POLICY access_visible ON {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            ),
        )
        execute_ddl(
            bind,
            sql.SQL(
                "ALTER TABLE {}.{} NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY"
            ).format(sql.Identifier(schema), sql.Identifier(table)),
        )
    _replace_audit_row(schema, changed=False)
    for name, table, *_rest in TRIGGERS:
        if not table.startswith("access_"):
            execute_ddl(
                bind,
                sql.SQL("DROP TRIGGER {} ON {}.{}").format(
                    sql.Identifier(name), sql.Identifier(schema), sql.Identifier(table)
                ),
            )
    for table in ("access_grants", "access_scopes", "access_entries"):
        op.drop_table(table, schema=schema)
    for table in ("documents", "folders"):
        op.drop_index(f"ix_{table}_access_scope", table, schema=schema)
        op.drop_index(f"ix_{table}_owner_id", table, schema=schema)
        op.drop_constraint(f"fk_{table}_owner_id_known_users", table, schema=schema)
        op.drop_column(table, "access_scope", schema=schema)
        op.drop_column(table, "owner_id", schema=schema)
    op.drop_column("folders", "inherits", schema=schema)
    op.drop_table("access_group_members", schema=schema)
    op.drop_table("access_groups", schema=schema)
    citus_functions = _citus_functions(schema) if citus.is_citus(bind) else ()
    for name, arguments, *_rest in (*citus_functions, *reversed(FUNCTIONS)):
        execute_ddl(
            bind,
            sql.SQL("DROP FUNCTION {}.{}({})").format(
                sql.Identifier(schema), sql.Identifier(name), sql.SQL(arguments)
            ),
        )


def _create_tables(schema: str) -> None:
    op.create_table(
        "access_groups",
        sa.Column("id", sa.Uuid, server_default=sa.func.gen_random_uuid(), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_access_groups"),
        sa.CheckConstraint(
            "btrim(name) <> '' AND length(name) <= 255", name="ck_access_groups_name_valid"
        ),
        schema=schema,
    )
    op.create_index(
        "uq_access_groups_name",
        "access_groups",
        [sa.text("lower(name)")],
        unique=True,
        schema=schema,
    )
    op.create_table(
        "access_group_members",
        sa.Column("group_id", sa.Uuid, nullable=False),
        sa.Column("user_id", sa.Uuid, nullable=False),
        sa.ForeignKeyConstraint(
            ["group_id"],
            [f"{schema}.access_groups.id"],
            ondelete="CASCADE",
            name="fk_access_group_members_group_id_access_groups",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            [f"{schema}.known_users.id"],
            ondelete="CASCADE",
            name="fk_access_group_members_user_id_known_users",
        ),
        sa.PrimaryKeyConstraint("group_id", "user_id", name="pk_access_group_members"),
        schema=schema,
    )
    op.create_index(
        "ix_access_group_members_user_id", "access_group_members", ["user_id"], schema=schema
    )
    op.create_table(
        "access_scopes",
        sa.Column("id", sa.Uuid, nullable=False),
        sa.Column("parent_id", sa.Uuid),
        sa.Column("inherits", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_access_scopes"),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            [f"{schema}.access_scopes.id"],
            ondelete="RESTRICT",
            name="fk_access_scopes_parent_id_access_scopes",
        ),
        schema=schema,
    )
    op.create_index("ix_access_scopes_parent_id", "access_scopes", ["parent_id"], schema=schema)
    op.create_table(
        "access_grants",
        sa.Column("scope_id", sa.Uuid, nullable=False),
        sa.Column("principal_id", sa.Uuid, nullable=False),
        sa.Column("rights", sa.SmallInteger, nullable=False),
        sa.PrimaryKeyConstraint("scope_id", "principal_id", name="pk_access_grants"),
        sa.ForeignKeyConstraint(
            ["scope_id"],
            [f"{schema}.access_scopes.id"],
            ondelete="CASCADE",
            name="fk_access_grants_scope_id_access_scopes",
        ),
        schema=schema,
    )
    op.create_index(
        "ix_access_grants_principal_id",
        "access_grants",
        ["principal_id", "scope_id", "rights"],
        schema=schema,
    )


def _add_columns(schema: str) -> None:
    for table in ("folders", "documents"):
        op.add_column(table, sa.Column("owner_id", sa.Uuid), schema=schema)
        # Every existing row falls under the root, which is what the constant default says
        # (no rewrite of the table).
        op.add_column(
            table,
            sa.Column(
                "access_scope", sa.Uuid, server_default=sa.text(f"'{NIL}'::uuid"), nullable=False
            ),
            schema=schema,
        )
        op.create_foreign_key(
            f"fk_{table}_owner_id_known_users",
            table,
            "known_users",
            ["owner_id"],
            ["id"],
            source_schema=schema,
            referent_schema=schema,
            ondelete="SET NULL",
        )
        op.create_index(f"ix_{table}_owner_id", table, ["owner_id"], schema=schema)
        op.create_index(f"ix_{table}_access_scope", table, ["access_scope"], schema=schema)
    op.add_column(
        "folders",
        sa.Column("inherits", sa.Boolean, server_default=sa.true(), nullable=False),
        schema=schema,
    )
    op.create_table(
        "access_entries",
        sa.Column("id", sa.Uuid, server_default=sa.func.gen_random_uuid(), nullable=False),
        sa.Column("folder_id", sa.Uuid),
        sa.Column("document_id", sa.Uuid),
        sa.Column("user_id", sa.Uuid),
        sa.Column("group_id", sa.Uuid),
        sa.Column("rights", sa.SmallInteger, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_access_entries"),
        sa.ForeignKeyConstraint(
            ["folder_id"],
            [f"{schema}.folders.id"],
            ondelete="CASCADE",
            name="fk_access_entries_folder_id_folders",
        ),
        sa.ForeignKeyConstraint(
            ["document_id"],
            [f"{schema}.documents.id"],
            ondelete="CASCADE",
            name="fk_access_entries_document_id_documents",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            [f"{schema}.known_users.id"],
            ondelete="CASCADE",
            name="fk_access_entries_user_id_known_users",
        ),
        sa.ForeignKeyConstraint(
            ["group_id"],
            [f"{schema}.access_groups.id"],
            ondelete="CASCADE",
            name="fk_access_entries_group_id_access_groups",
        ),
        sa.CheckConstraint(
            "num_nonnulls(folder_id, document_id) <= 1", name="ck_access_entries_one_object"
        ),
        sa.CheckConstraint(
            "num_nonnulls(user_id, group_id) <= 1", name="ck_access_entries_one_principal"
        ),
        # View is implied by every right, and manage by nothing less than all of them.
        sa.CheckConstraint(
            f"rights & {VIEW} = {VIEW} AND rights BETWEEN 1 AND 15"
            f" AND (rights & {MANAGE} = 0 OR rights = 15)",
            name="ck_access_entries_rights_valid",
        ),
        schema=schema,
    )
    op.create_index(
        "uq_access_entries_object_principal",
        "access_entries",
        ["folder_id", "document_id", "user_id", "group_id"],
        unique=True,
        schema=schema,
        postgresql_nulls_not_distinct=True,
    )
    for column in ("document_id", "user_id", "group_id"):
        op.create_index(f"ix_access_entries_{column}", "access_entries", [column], schema=schema)


def _create_triggers(schema: str) -> Iterator[sql.Composable]:
    for name, table, events, condition, function, arguments in TRIGGERS:
        yield sql.SQL(
            "CREATE TRIGGER {} {} ON {}.{} FOR EACH ROW{} EXECUTE FUNCTION {}.{}({})"
        ).format(
            sql.Identifier(name),
            sql.SQL(events),
            sql.Identifier(schema),
            sql.Identifier(table),
            sql.SQL("") if condition is None else sql.SQL(" WHEN ({})").format(sql.SQL(condition)),
            sql.Identifier(schema),
            sql.Identifier(function),
            sql.SQL(", ").join(sql.Literal(argument) for argument in arguments),
        )


def _secure(schema: str, table: str, visible: str) -> Iterator[sql.Composable]:
    yield sql.SQL("ALTER TABLE {}.{} ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    # The policy decides what is seen, and so which rows a statement can reach; the rights a
    # write needs beyond that are the triggers' (access_*_rules, with an error that names the
    # missing right). As its own check, the policy refuses a write that would take a row out
    # of the actor's sight (PostgreSQL checks an updated row against it anyway).
    yield sql.SQL("CREATE POLICY access_visible ON {}.{} USING ({})").format(
        sql.Identifier(schema),
        sql.Identifier(table),
        sql.SQL(visible).format(s=sql.Identifier(schema)),
    )


def _replace_audit_row(schema: str, *, changed: bool) -> None:
    """Put back revision 0013's ``audit_row``, with :data:`_AUDIT_ROW_CHANGES` or as it was."""
    module: ModuleType = op.get_context().script.get_revision("0013").module  # type: ignore[union-attr]
    source = str(module.ROW)
    for was, now in _AUDIT_ROW_CHANGES:
        if was not in source:
            raise RuntimeError("revision 0013's audit_row has changed: update revision 0016")
        if changed:
            source = source.replace(was, now)
    execute_ddl(
        op.get_bind(),
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {}.audit_row() RETURNS trigger LANGUAGE plpgsql "
            "SET search_path = {}, pg_temp AS {}"
        ).format(sql.Identifier(schema), sql.Identifier(schema), sql.Literal(source)),
    )
