# ruff: noqa: E501 (the rules' texts are kept as they are written)
"""The database's rules as readable source: every rule of a tenant, whole, as it stands here.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07

Tenant only, and nothing changes in the database. From here on, every function, trigger,
row-level security policy and row-security switch of a tenant schema is written once in the
area files of dms/schema/sql (dms.schema.rules), and a revision that changes rules is generated
from them with the whole texts, as they were and as they are (``dms rules revision``,
dms.migrations.frozen, docs/rules.md). This revision holds every rule as the revisions before
it, written by hand, leave it: the "as they were" of the first generated change.
tests/migrations/test_rules.py shows that a tenant at this revision holds exactly what these
texts create, on plain PostgreSQL and on Citus.
"""

from __future__ import annotations

from dms.migrations import MigrationScope

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | None = None
depends_on: str | None = None

#: Every rule of a tenant schema at this revision, in the order it is created.
BASELINE = (
    r"""-- Enlists the user a row names in known_users before the row is written, so writers name users
-- as if the columns referred to the IAM directly. TG_ARGV[0] is the column; each branch reads
-- only its own, since PL/pgSQL resolves NEW.<column> when the branch first runs and the tables
-- differ. A NULL is left to the column's NOT NULL constraint, which names the column.
CREATE OR REPLACE FUNCTION known_users_enlist()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
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
$$""",
    r"""CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON folders
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by')""",
    r"""CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON documents
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by')""",
    r"""CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF uploaded_by ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('uploaded_by')""",
    r"""CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON tags
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by')""",
    r"""CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON metadata_fields
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by')""",
    r"""CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF imported_by ON import_provenance
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('imported_by')""",
    r"""-- Insert: takes the next number (or checks the one given), the document's row locked so that
-- concurrent uploads to one document queue instead of racing for a number. Update: refuses any
-- change of document, number, storage key, SHA-256, size, MIME type or uploader. Delete: only
-- by the cascade from deleting the document itself.
CREATE OR REPLACE FUNCTION file_revisions_guard()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    next_no integer;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM 1 FROM documents WHERE id = NEW.document_id FOR UPDATE;
        SELECT coalesce(max(revision_no), 0) + 1 INTO next_no
          FROM file_revisions WHERE document_id = NEW.document_id;
        IF NEW.revision_no IS NULL THEN
            NEW.revision_no := next_no;
        ELSIF NEW.revision_no <> next_no THEN
            RAISE EXCEPTION 'revision % of document % breaks the sequence: the next is %',
                NEW.revision_no, NEW.document_id, next_no
                USING ERRCODE = '23M01', CONSTRAINT = 'file_revisions_gap_free';
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        IF (NEW.document_id, NEW.revision_no, NEW.storage_key, NEW.sha256, NEW.size_bytes,
            NEW.mime_type, NEW.uploaded_by)
           IS DISTINCT FROM
           (OLD.document_id, OLD.revision_no, OLD.storage_key, OLD.sha256, OLD.size_bytes,
            OLD.mime_type, OLD.uploaded_by) THEN
            RAISE EXCEPTION 'file revision % is immutable', OLD.id
                USING ERRCODE = '23M02', CONSTRAINT = 'file_revisions_append_only';
        END IF;
        RETURN NEW;
    END IF;
    -- DELETE: only together with the document (the cascade runs after the document is gone).
    IF EXISTS (SELECT 1 FROM documents WHERE id = OLD.document_id) THEN
        RAISE EXCEPTION 'file revision % can only be deleted with its document', OLD.id
            USING ERRCODE = '23M02', CONSTRAINT = 'file_revisions_append_only';
    END IF;
    RETURN OLD;
END
$$""",
    r"""CREATE TRIGGER file_revisions_guard
    BEFORE INSERT OR DELETE OR UPDATE ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION file_revisions_guard()""",
    r"""-- Checks a new or changed parent: the walk up from the parent must not reach the folder itself,
-- and the parent's depth plus the height of the moved subtree must stay within 32. Tree changes
-- of one tenant serialise on an advisory lock, since two concurrent moves could each pass the
-- check alone and together form a cycle.
CREATE OR REPLACE FUNCTION folders_guard()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    cycle boolean;
    parent_depth integer;
    subtree_height integer := 1;
BEGIN
    IF NEW.parent_id IS NULL
       OR (TG_OP = 'UPDATE' AND NEW.parent_id IS NOT DISTINCT FROM OLD.parent_id) THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('dms.folders:' || TG_TABLE_SCHEMA, 0));
    WITH RECURSIVE ancestors(id, parent_id, depth) AS (
        SELECT f.id, f.parent_id, 1 FROM folders f WHERE f.id = NEW.parent_id
        UNION ALL
        SELECT f.id, f.parent_id, a.depth + 1
          FROM folders f JOIN ancestors a ON f.id = a.parent_id
         WHERE a.depth <= 32
    )
    SELECT coalesce(bool_or(id = NEW.id), false), max(depth) INTO cycle, parent_depth
      FROM ancestors;
    IF cycle THEN
        RAISE EXCEPTION 'folder % cannot move under its own descendant %', NEW.id, NEW.parent_id
            USING ERRCODE = '23M03', CONSTRAINT = 'folders_no_cycle';
    END IF;
    IF parent_depth IS NULL THEN
        RETURN NEW;  -- unknown parent: the foreign key reports it
    END IF;
    IF TG_OP = 'UPDATE' THEN
        WITH RECURSIVE subtree(id, level) AS (
            SELECT NEW.id, 1
            UNION ALL
            SELECT f.id, s.level + 1 FROM folders f JOIN subtree s ON f.parent_id = s.id
             WHERE s.level <= 32
        )
        SELECT max(level) INTO subtree_height FROM subtree;
    END IF;
    IF parent_depth + subtree_height > 32 THEN
        RAISE EXCEPTION 'folder % would be % levels deep; the limit is 32',
            NEW.id, parent_depth + subtree_height
            USING ERRCODE = '23M04', CONSTRAINT = 'folders_max_depth';
    END IF;
    RETURN NEW;
END
$$""",
    r"""CREATE TRIGGER folders_guard
    BEFORE INSERT OR UPDATE OF parent_id ON folders
    FOR EACH ROW
    EXECUTE FUNCTION folders_guard()""",
    r"""-- The acting user: dms.actor as a uuid, or NULL for a system principal or when nobody is named.
-- PL/pgSQL rather than SQL so that its plan is kept for the session: every policy calls it.
CREATE OR REPLACE FUNCTION access_user()
    RETURNS uuid LANGUAGE plpgsql STABLE
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    actor text := coalesce(current_setting('dms.actor', true), '');
BEGIN
    IF actor = '' OR actor LIKE 'system:%' THEN
        RETURN NULL;
    END IF;
    RETURN actor::uuid;
END
$$""",
    r"""-- Whether a named system principal (dms.actor 'system:<name>') acts: it holds every right, by
-- name, so the code that uses one says so and the audit trail records it.
CREATE OR REPLACE FUNCTION access_system()
    RETURNS boolean LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$SELECT coalesce(current_setting('dms.actor', true), '') LIKE 'system:%'$$""",
    r"""-- Everyone the actor's rights come from: everyone (the nil uuid), the acting user and the groups
-- they are a member of. Memberships are read here, at query time, so adding a member to a group
-- rewrites no grant. PL/pgSQL so its plan is kept for the session: every policy reads it.
CREATE OR REPLACE FUNCTION access_principals()
    RETURNS uuid[] LANGUAGE plpgsql STABLE
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    actor uuid := access_user();
BEGIN
    RETURN array_remove(ARRAY['00000000-0000-0000-0000-000000000000'::uuid, actor], NULL)
        || array(SELECT m.group_id FROM access_group_members m WHERE m.user_id = actor);
END
$$""",
    r"""-- Whether the actor holds every right of `wanted` on an object under `scope` owned by `owner`:
-- a system principal holds all, the owner holds all on the object itself, anyone else what the
-- scope's grants give their principals. The one rule every write check goes through.
CREATE OR REPLACE FUNCTION access_allows(scope uuid, owner uuid, wanted integer)
    RETURNS boolean LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$
SELECT access_system()
    OR coalesce(owner = access_user(), false)
    OR EXISTS (
        SELECT 1 FROM access_grants g
         WHERE g.scope_id = scope AND g.principal_id = ANY (access_principals())
           AND g.rights & wanted = wanted)
$$""",
    r"""-- The names of the rights a mask asks for, for the message of a refusal. View is named only when
-- it is all that is asked, since every other right implies it.
CREATE OR REPLACE FUNCTION access_right_names(wanted integer)
    RETURNS text LANGUAGE sql IMMUTABLE
    SET search_path = :"schema", pg_temp
AS $$
SELECT array_to_string(array_remove(ARRAY[
    CASE WHEN wanted & 8 <> 0 THEN 'manage' END,
    CASE WHEN wanted & 4 <> 0 THEN 'delete' END,
    CASE WHEN wanted & 2 <> 0 THEN 'edit' END,
    CASE WHEN wanted & 1 <> 0 AND wanted = 1 THEN 'view' END
], NULL), ' and ')
$$""",
    r"""-- Refuse (SQLSTATE 42501, which the library raises as PermissionDenied) unless the actor holds
-- `wanted` on the object; the message names the missing right and the object, the detail the actor.
CREATE OR REPLACE FUNCTION access_require(scope uuid, owner uuid, wanted integer, what text, object_name text)
    RETURNS void LANGUAGE plpgsql STABLE
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF NOT access_allows(scope, owner, wanted) THEN
        RAISE EXCEPTION 'permission denied: % on %', what, object_name
            USING ERRCODE = '42501', DETAIL = format('actor %s',
                coalesce(nullif(current_setting('dms.actor', true), ''), 'nobody'));
    END IF;
END
$$""",
    r"""-- The scope that an object placed in `folder` falls under: the folder's own scope, or the root's
-- for the top level (NULL). A folder that does not exist also gives the root's: its foreign key
-- refuses the row anyway.
CREATE OR REPLACE FUNCTION access_folder_scope(folder uuid)
    RETURNS uuid LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$
SELECT coalesce((SELECT f.access_scope FROM folders f WHERE f.id = folder), '00000000-0000-0000-0000-000000000000'::uuid)
$$""",
    r"""-- The owner of `folder`, whose rights on it count for what is created in or moved into it; the
-- root (NULL) has no owner.
CREATE OR REPLACE FUNCTION access_folder_owner(folder uuid)
    RETURNS uuid LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$SELECT f.owner_id FROM folders f WHERE f.id = folder$$""",
    r"""-- Refuse unless the actor holds `wanted` on `folder` (the root for NULL): creating or moving an
-- object into a folder needs edit there. A folder that does not exist is left to the foreign
-- key, so the caller is told NotFound rather than refused.
CREATE OR REPLACE FUNCTION access_require_in_folder(folder uuid, wanted integer)
    RETURNS void LANGUAGE plpgsql STABLE
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF folder IS NOT NULL AND NOT EXISTS (SELECT 1 FROM folders f WHERE f.id = folder) THEN
        RETURN;
    END IF;
    PERFORM access_require(access_folder_scope(folder), access_folder_owner(folder), wanted,
                           access_right_names(wanted), coalesce('folder ' || folder, 'the root'));
END
$$""",
    r"""-- Add a user that an access row names (an owner, an entry's or a membership's user) to
-- known_users before the row is written, so that its foreign key accepts every user of the IAM
-- and refuses only those who do not exist (as known_users_enlist does for the older columns).
CREATE OR REPLACE FUNCTION access_enlist(person uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF person IS NOT NULL THEN
        INSERT INTO known_users (id) VALUES (person) ON CONFLICT (id) DO NOTHING;
    END IF;
END
$$""",
    r"""-- Recompute a scope's grants, then those of every scope inheriting from it: its own entries, with
-- its parent's grants if it inherits, each principal's rights or-ed together. Only changed grants
-- are written (no dead rows for later reads); on_document marks a document's scope for the
-- policies. Row by row in single-table statements: on Citus an INSERT ... SELECT fails here.
CREATE OR REPLACE FUNCTION access_refresh(scope uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    parent uuid;
    inheriting boolean;
    child uuid;
    granted record;
    wanted jsonb := '{}';
    on_document boolean := EXISTS (SELECT 1 FROM documents d WHERE d.id = scope);
BEGIN
    SELECT s.parent_id, s.inherits INTO parent, inheriting FROM access_scopes s WHERE s.id = scope;
    FOR granted IN
        SELECT coalesce(e.user_id, e.group_id, '00000000-0000-0000-0000-000000000000'::uuid)::text AS principal, e.rights
          FROM access_entries e
         WHERE e.folder_id = scope OR e.document_id = scope
            OR (scope = '00000000-0000-0000-0000-000000000000'::uuid AND e.folder_id IS NULL AND e.document_id IS NULL)
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
        INSERT INTO access_grants AS held (scope_id, principal_id, rights, on_document)
        VALUES (scope, granted.principal::uuid, granted.rights, on_document)
        ON CONFLICT (scope_id, principal_id) DO UPDATE SET rights = excluded.rights
         WHERE held.rights <> excluded.rights;
    END LOOP;
    FOR child IN SELECT s.id FROM access_scopes s WHERE s.parent_id = scope AND s.inherits LOOP
        PERFORM access_refresh(child);
    END LOOP;
END
$$""",
    r"""-- Point the rows under `folder` (itself included) that fell under `old_scope` to `new_scope`, and
-- make the scopes below it that inherited from `old_scope` inherit from `new_scope` (their grants
-- recomputed). Rows under a scope deeper down keep theirs. Used when a folder moves or becomes a
-- scope; array values in single-table statements, for Citus.
CREATE OR REPLACE FUNCTION access_repoint(folder uuid, old_scope uuid, new_scope uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
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
$$""",
    r"""-- Make a folder a scope of its own when it gets entries or stops inheriting: what below it fell
-- under the scope above now falls under the folder, whose grants are computed. Nothing to do for
-- a folder that is a scope already.
CREATE OR REPLACE FUNCTION access_folder_becomes_scope(folder uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
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
$$""",
    r"""-- Make a document a scope of its own when it gets entries ("shared with"): it inherits from its
-- folder's scope, and its grants add its own entries to those.
CREATE OR REPLACE FUNCTION access_document_becomes_scope(doc uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
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
$$""",
    r"""-- Before a folder is written: a new one is owned by its creator and falls under its parent's
-- scope (its own if it does not inherit). A write needs the actor's right: edit to change it,
-- delete to trash, restore or purge it, manage for its owner or inheritance, and edit on the
-- destination to create or move it. Only direct statements are checked, not the database's upkeep.
CREATE OR REPLACE FUNCTION access_folder_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    direct boolean := pg_trigger_depth() = 1;
    wanted integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF direct THEN
            PERFORM access_require(OLD.access_scope, OLD.owner_id, 4,
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
            PERFORM access_require_in_folder(NEW.parent_id, 2);
        END IF;
        RETURN NEW;
    END IF;
    IF NOT direct THEN
        RETURN NEW;
    END IF;
    PERFORM access_enlist(NEW.owner_id);
    NEW.access_scope := OLD.access_scope;
    wanted := CASE WHEN NEW.deleted_at IS DISTINCT FROM OLD.deleted_at THEN 4 ELSE 2 END
            | CASE WHEN NEW.owner_id IS DISTINCT FROM OLD.owner_id
                     OR NEW.inherits IS DISTINCT FROM OLD.inherits THEN 8 ELSE 0 END;
    PERFORM access_require(OLD.access_scope, OLD.owner_id, wanted,
                           access_right_names(wanted), 'folder ' || OLD.id);
    IF NEW.parent_id IS DISTINCT FROM OLD.parent_id THEN
        PERFORM access_require_in_folder(NEW.parent_id, 2);
        IF OLD.access_scope <> OLD.id THEN
            NEW.access_scope := access_folder_scope(NEW.parent_id);
        END IF;
    END IF;
    -- A folder that stops inheriting becomes a scope after the row is written
    -- (access_folder_changed), with the rows below it.
    RETURN NEW;
END
$$""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON folders
    FOR EACH ROW
    EXECUTE FUNCTION access_folder_rules()""",
    r"""-- After a folder is created, moved or switches inheritance: keep the derived scopes and grants. A
-- folder that is a scope is re-parented and its grants recomputed; otherwise its subtree follows
-- it to the scope it now falls under, and a folder that stops inheriting becomes a scope.
CREATE OR REPLACE FUNCTION access_folder_changed()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
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
$$""",
    r"""-- A new folder that does not inherit is a scope from the start.
CREATE TRIGGER access_placed
    AFTER INSERT ON folders
    FOR EACH ROW
    EXECUTE FUNCTION access_folder_changed()""",
    r"""-- Only a move or an inheritance switch changes which scope a folder's subtree falls under.
CREATE TRIGGER access_moved
    AFTER UPDATE OF parent_id, inherits ON folders
    FOR EACH ROW WHEN (((old.parent_id IS DISTINCT FROM new.parent_id) OR (old.inherits IS DISTINCT FROM new.inherits)))
    EXECUTE FUNCTION access_folder_changed()""",
    r"""-- Before a document is written: a new one is owned by its creator and falls under its folder's
-- scope (a document with entries keeps its own). A write needs the actor's right: edit to change
-- it, delete to trash, restore or purge it, manage for its owner, and edit on the destination to
-- create or move it. Only direct statements are checked, not the database's upkeep.
CREATE OR REPLACE FUNCTION access_document_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    direct boolean := pg_trigger_depth() = 1;
    wanted integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF direct THEN
            PERFORM access_require(OLD.access_scope, OLD.owner_id, 4,
                                   'delete', 'document ' || OLD.id);
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.owner_id := coalesce(NEW.owner_id, access_user());
        PERFORM access_enlist(NEW.owner_id);
        NEW.access_scope := access_folder_scope(NEW.folder_id);
        IF direct THEN
            PERFORM access_require_in_folder(NEW.folder_id, 2);
        END IF;
        RETURN NEW;
    END IF;
    IF NOT direct THEN
        RETURN NEW;
    END IF;
    PERFORM access_enlist(NEW.owner_id);
    NEW.access_scope := OLD.access_scope;
    wanted := CASE WHEN NEW.deleted_at IS DISTINCT FROM OLD.deleted_at THEN 4 ELSE 2 END
            | CASE WHEN NEW.owner_id IS DISTINCT FROM OLD.owner_id THEN 8 ELSE 0 END;
    PERFORM access_require(OLD.access_scope, OLD.owner_id, wanted,
                           access_right_names(wanted), 'document ' || OLD.id);
    IF NEW.folder_id IS DISTINCT FROM OLD.folder_id THEN
        PERFORM access_require_in_folder(NEW.folder_id, 2);
        IF OLD.access_scope <> OLD.id THEN
            NEW.access_scope := access_folder_scope(NEW.folder_id);
        END IF;
    END IF;
    RETURN NEW;
END
$$""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON documents
    FOR EACH ROW
    EXECUTE FUNCTION access_document_rules()""",
    r"""-- After a document with entries of its own moves: its scope now inherits from its new folder's,
-- so its grants are recomputed. A document without entries got its new scope before the write.
CREATE OR REPLACE FUNCTION access_document_moved()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF NEW.access_scope = NEW.id THEN
        UPDATE access_scopes SET parent_id = access_folder_scope(NEW.folder_id) WHERE id = NEW.id;
        PERFORM access_refresh(NEW.id);
    END IF;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER access_moved
    AFTER UPDATE OF folder_id ON documents
    FOR EACH ROW WHEN ((old.folder_id IS DISTINCT FROM new.folder_id))
    EXECUTE FUNCTION access_document_moved()""",
    r"""-- A folder or document deleted for good takes its scope (and with it its grants) along, so no
-- derived row outlives its object.
CREATE OR REPLACE FUNCTION access_object_deleted()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    DELETE FROM access_scopes WHERE id = OLD.id;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER access_deleted
    AFTER DELETE ON folders
    FOR EACH ROW
    EXECUTE FUNCTION access_object_deleted()""",
    r"""CREATE TRIGGER access_deleted
    AFTER DELETE ON documents
    FOR EACH ROW
    EXECUTE FUNCTION access_object_deleted()""",
    r"""-- Before a row that belongs to a document (a revision, a tag link, a metadata value, a text) is
-- written, the actor needs edit on the document. TG_ARGV[0] names the column that leads to the
-- document: document_id, or revision_id through the revision. A missing document is left to the
-- foreign key; the database's own triggers and system principals pass.
CREATE OR REPLACE FUNCTION access_content_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
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
        PERFORM access_require(doc_scope, doc_owner, 2, 'edit', 'document ' || doc);
    END IF;
    RETURN coalesce(NEW, OLD);
END
$$""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id')""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON document_tags
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id')""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON document_metadata
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id')""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON document_metadata_choices
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id')""",
    r"""-- A text leads to its document through its revision.
CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON revision_texts
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('revision_id')""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON revision_text_parts
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('revision_id')""",
    r"""-- Before an access entry is written (a grant or a revoke): the actor needs manage on its object,
-- the root's for an entry on neither folder nor document. The entry's user is enlisted first; an
-- object that does not exist is left to the foreign key.
CREATE OR REPLACE FUNCTION access_entry_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    entry access_entries := coalesce(NEW, OLD);
    object_scope uuid := '00000000-0000-0000-0000-000000000000'::uuid;
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
    PERFORM access_require(object_scope, object_owner, 8, 'manage',
        coalesce('folder ' || entry.folder_id, 'document ' || entry.document_id, 'the root'));
    RETURN coalesce(NEW, OLD);
END
$$""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_entries
    FOR EACH ROW
    EXECUTE FUNCTION access_entry_rules()""",
    r"""-- After an access entry is written: its object becomes a scope if it was not, and the grants of
-- that scope and of the scopes inheriting from it are recomputed, for the old row and the new. An
-- object deleted for good (its scope gone with it) is skipped.
CREATE OR REPLACE FUNCTION access_entry_changed()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
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
            PERFORM access_refresh('00000000-0000-0000-0000-000000000000'::uuid);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER access_changed
    AFTER INSERT OR DELETE OR UPDATE ON access_entries
    FOR EACH ROW
    EXECUTE FUNCTION access_entry_changed()""",
    r"""-- Changes to the whole tenant need manage at the root: its groups and memberships, and deleting a
-- tag, a metadata field or an option (which reaches into every document using it, seen or not).
-- A trigger argument names a user column to enlist: not TG_TABLE_NAME, since on Citus the trigger
-- runs on a shard, whose table has another name.
CREATE OR REPLACE FUNCTION access_root_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF TG_NARGS > 0 AND TG_OP <> 'DELETE' THEN
        PERFORM access_enlist((to_jsonb(NEW) ->> TG_ARGV[0])::uuid);
    END IF;
    IF pg_trigger_depth() = 1 THEN
        PERFORM access_require('00000000-0000-0000-0000-000000000000'::uuid, NULL, 8, 'manage', 'the root');
    END IF;
    RETURN coalesce(NEW, OLD);
END
$$""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_groups
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules()""",
    r"""-- A membership names a user, enlisted before the foreign key checks it.
CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_group_members
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules('user_id')""",
    r"""-- Adding and renaming tags, fields and options is anyone's; deleting one needs manage.
CREATE TRIGGER access_rules
    BEFORE DELETE ON tags
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules()""",
    r"""CREATE TRIGGER access_rules
    BEFORE DELETE ON metadata_fields
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules()""",
    r"""CREATE TRIGGER access_rules
    BEFORE DELETE ON metadata_field_options
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules()""",
    r"""-- access_scopes and access_grants are derived from the entries: only the database's triggers
-- write them, and a direct write is refused with a pointer to access_entries.
CREATE OR REPLACE FUNCTION access_derived_only()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF pg_trigger_depth() = 1 THEN
        RAISE EXCEPTION '% is kept by the database: write access_entries instead', TG_TABLE_NAME
            USING ERRCODE = '42501';
    END IF;
    RETURN coalesce(NEW, OLD);
END
$$""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_scopes
    FOR EACH ROW
    EXECUTE FUNCTION access_derived_only()""",
    r"""CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_grants
    FOR EACH ROW
    EXECUTE FUNCTION access_derived_only()""",
    r"""-- A folder is visible to its owner and to whoever holds "view" on its scope (an entry on it or
-- inherited from above). The scopes the actor views are read once per statement.
ALTER TABLE folders ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_object_visible(owner_id uuid, access_scope uuid)
CREATE POLICY access_visible ON folders USING (
    (SELECT pg_trigger_depth() > 0 OR access_system())
    OR owner_id = (SELECT access_user())
    OR access_scope IN (
        SELECT g.scope_id FROM access_grants g
         WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[]))
           AND NOT g.on_document AND g.rights & 1 = 1)
)""",
    r"""-- A document is visible to its owner; under its folder's scope, as that scope is (the set of
-- folder scopes the actor views, read once per statement); a document with entries of its own
-- is its own scope, probed by primary key row by row (OFFSET 0 keeps the probe from being
-- hashed into a set of every document scope the actor holds).
ALTER TABLE documents ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_document_row_visible(id uuid, owner_id uuid, access_scope uuid)
CREATE POLICY access_visible ON documents USING (
    (SELECT pg_trigger_depth() > 0 OR access_system())
    OR owner_id = (SELECT access_user())
    OR (access_scope <> id AND access_scope IN (
        SELECT g.scope_id FROM access_grants g
         WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[]))
           AND NOT g.on_document AND g.rights & 1 = 1))
    OR (access_scope = id AND EXISTS (
        SELECT 1 FROM access_grants g
         WHERE g.scope_id = id
           AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[]))
           AND g.rights & 1 = 1 OFFSET 0))
)""",
    r"""-- A document's revisions, tags, metadata values and search rows are visible with the document
-- (its own policy decides, inside the EXISTS).
ALTER TABLE file_revisions ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON file_revisions USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
)""",
    r"""ALTER TABLE document_tags ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_tags USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
)""",
    r"""ALTER TABLE document_metadata ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_metadata USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
)""",
    r"""ALTER TABLE document_metadata_choices ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_metadata_choices USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
)""",
    r"""ALTER TABLE document_search ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_search USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
)""",
    r"""-- A revision's extracted text and its parts are visible with the revision (so with its
-- document).
ALTER TABLE revision_texts ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_revision_visible(revision_id uuid)
CREATE POLICY access_visible ON revision_texts USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".file_revisions r WHERE r.id = revision_id)
)""",
    r"""ALTER TABLE revision_text_parts ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_revision_visible(revision_id uuid)
CREATE POLICY access_visible ON revision_text_parts USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".file_revisions r WHERE r.id = revision_id)
)""",
    r"""-- An access entry is visible with the folder or document it is on; the root's entries (on
-- neither) to everyone.
ALTER TABLE access_entries ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_entry_visible(folder_id uuid, document_id uuid)
CREATE POLICY access_visible ON access_entries USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR (folder_id IS NULL AND document_id IS NULL)
    OR EXISTS (SELECT 1 FROM :"schema".folders f WHERE f.id = folder_id)
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
)""",
    r"""-- An audit event is visible with its document, folder or access entry; events about neither
-- (tags, fields, groups) to everyone.
ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY""",
    r"""-- on citus: access_event_visible(object_type text, object_id uuid, document_id uuid)
CREATE POLICY access_visible ON audit_events USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR (document_id IS NULL AND object_type NOT IN ('folder', 'access_entry'))
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
    OR (object_type = 'folder'
        AND EXISTS (SELECT 1 FROM :"schema".folders f WHERE f.id = object_id))
    OR (object_type = 'access_entry'
        AND EXISTS (SELECT 1 FROM :"schema".access_entries e WHERE e.id = object_id))
)""",
    r"""-- Fills in who, when, which transaction and context on every inserted event, whatever the
-- inserting statement said, so an event cannot claim another actor or time. Every event starts
-- unsealed: only sealing gives it a place in the chain.
CREATE OR REPLACE FUNCTION audit_stamp()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    actor text := nullif(current_setting('dms.actor', true), '');
BEGIN
    NEW.occurred_at := clock_timestamp();
    NEW.txid := pg_current_xact_id()::text::bigint;
    NEW.db_role := session_user;
    NEW.actor_id := NULL;
    NEW.actor_system := NULL;
    IF actor LIKE 'system:%' THEN
        NEW.actor_system := substr(actor, 8);
    ELSIF actor IS NOT NULL THEN
        NEW.actor_id := actor::uuid;
    END IF;
    NEW.context := nullif(current_setting('dms.context', true), '')::jsonb;
    NEW.seq := NULL;
    NEW.hash := NULL;
    NEW.sealed_at := NULL;
    RETURN NEW;
END
$$""",
    r"""CREATE TRIGGER audit_stamp
    BEFORE INSERT ON audit_events
    FOR EACH ROW
    EXECUTE FUNCTION audit_stamp()""",
    r"""-- Keeps events append-only: an update may only seal an unsealed event (set seq, hash and
-- sealed_at once, everything else unchanged), and a delete is only pruning, of an event at or
-- below the newest checkpoint. Anything else is refused with SQLSTATE 23M05.
CREATE OR REPLACE FUNCTION audit_guard()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    unsealed audit_events;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.seq <= (SELECT max(seq) FROM audit_checkpoints) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit events are append-only: event % is not below a checkpoint', OLD.id
            USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
    END IF;
    unsealed := NEW;
    unsealed.seq := NULL;
    unsealed.hash := NULL;
    unsealed.sealed_at := NULL;
    IF OLD.seq IS NULL AND NEW.seq IS NOT NULL AND unsealed IS NOT DISTINCT FROM OLD THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit events are append-only: event % cannot be changed', OLD.id
        USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
END
$$""",
    r"""CREATE TRIGGER audit_guard
    BEFORE DELETE OR UPDATE ON audit_events
    FOR EACH ROW
    EXECUTE FUNCTION audit_guard()""",
    r"""-- Refuses outright, with SQLSTATE 23M05: truncating events or checkpoints, and changing or
-- deleting a checkpoint (where pruning cut the chain, which verification starts from).
CREATE OR REPLACE FUNCTION audit_refuse()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
END
$$""",
    r"""-- TRUNCATE fires no row trigger, so audit_guard never sees it: it is refused per statement.
CREATE TRIGGER audit_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_refuse()""",
    r"""-- A checkpoint is never changed or deleted: the guard of checkpoints refuses every row.
CREATE TRIGGER audit_guard
    BEFORE DELETE OR UPDATE ON audit_checkpoints
    FOR EACH ROW
    EXECUTE FUNCTION audit_refuse()""",
    r"""CREATE TRIGGER audit_no_truncate
    BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_refuse()""",
    r"""-- One event per changed row of an audited table; TG_ARGV is (object type, the column naming
-- the event's document or ''). An update records only the columns it changed, leaving out
-- updated_at and the derived access_scope (rewritten below every moved folder), and records
-- nothing if nothing else changed; a change of deleted_at is a trash or restore.
CREATE OR REPLACE FUNCTION audit_row()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    old_row jsonb := CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END;
    new_row jsonb := CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END;
    row_now jsonb := coalesce(new_row, old_row);
    before_values jsonb;
    after_values jsonb;
    verb text := lower(TG_OP);
BEGIN
    IF TG_OP = 'UPDATE' THEN
        SELECT jsonb_object_agg(o.key, o.value), jsonb_object_agg(o.key, new_row -> o.key)
          INTO before_values, after_values
          FROM jsonb_each(old_row) o
         WHERE o.key NOT IN ('updated_at', 'access_scope') AND o.value IS DISTINCT FROM new_row -> o.key;
        IF before_values IS NULL THEN
            RETURN NULL;
        END IF;
        IF after_values ? 'deleted_at' THEN
            verb := CASE WHEN after_values ->> 'deleted_at' IS NULL THEN 'restore' ELSE 'trash' END;
        END IF;
    ELSE
        before_values := old_row;
        after_values := new_row;
        verb := CASE TG_OP WHEN 'INSERT' THEN 'create' ELSE 'delete' END;
    END IF;
    INSERT INTO audit_events (object_type, action, object_id, document_id, before, after)
    VALUES (
        TG_ARGV[0],
        verb,
        coalesce(row_now ->> 'id', row_now ->> 'field_id', row_now ->> 'group_id')::uuid,
        nullif(row_now ->> TG_ARGV[1], '')::uuid,
        before_values,
        after_values
    );
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON documents
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('document', 'id')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('revision', 'document_id')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON folders
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('folder', '')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON tags
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('tag', '')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON metadata_fields
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('metadata_field', '')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON metadata_field_options
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('metadata_option', '')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON document_metadata
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('metadata_value', 'document_id')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON access_entries
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('access_entry', 'document_id')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON access_groups
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('group', '')""",
    r"""CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON access_group_members
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('group_member', '')""",
    r"""-- A document's tags and a multi-select value's choices are recorded as sets: one link event
-- per set a statement changed, with the whole set before and after, however many links changed.
-- The statement's transition table gives its own links, taken out of (insert) or put back into
-- (delete) the set as it now is. TG_ARGV: object type, owner column, member column, set name.
CREATE OR REPLACE FUNCTION audit_links()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    owner record;
    now_set uuid[];
    then_set uuid[];
BEGIN
    FOR owner IN EXECUTE format(
        'SELECT document_id, %1$I AS object_id, array_agg(DISTINCT %2$I) AS members
           FROM changed GROUP BY document_id, %1$I',
        TG_ARGV[1], TG_ARGV[2])
    LOOP
        EXECUTE format(
            'SELECT coalesce(array_agg(%1$I ORDER BY %1$I), ''{}'') FROM %2$I
              WHERE document_id = $1 AND %3$I = $2',
            TG_ARGV[2], TG_TABLE_NAME, TG_ARGV[1])
          INTO now_set USING owner.document_id, owner.object_id;
        IF TG_OP = 'INSERT' THEN
            then_set := array(SELECT m FROM unnest(now_set) m WHERE m <> ALL (owner.members));
        ELSE
            then_set := array(SELECT DISTINCT m FROM unnest(now_set || owner.members) m ORDER BY m);
        END IF;
        INSERT INTO audit_events (object_type, action, object_id, document_id, before, after)
        VALUES (
            TG_ARGV[0],
            'link',
            owner.object_id,
            owner.document_id,
            jsonb_build_object(TG_ARGV[3], to_jsonb(then_set)),
            jsonb_build_object(TG_ARGV[3], to_jsonb(now_set))
        );
    END LOOP;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER audit_links_insert
    AFTER INSERT ON document_tags
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('document', 'document_id', 'tag_id', 'tag_ids')""",
    r"""CREATE TRIGGER audit_links_delete
    AFTER DELETE ON document_tags
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('document', 'document_id', 'tag_id', 'tag_ids')""",
    r"""CREATE TRIGGER audit_links_insert
    AFTER INSERT ON document_metadata_choices
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('metadata_value', 'field_id', 'option_id', 'option_ids')""",
    r"""CREATE TRIGGER audit_links_delete
    AFTER DELETE ON document_metadata_choices
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('metadata_value', 'field_id', 'option_id', 'option_ids')""",
    r"""-- Accent folding for both sides of a search: the indexed text and the query's words go through
-- this one function, so an unaccented word finds its accented spelling. unaccent's dictionary
-- is named with its schema so that the result never depends on the caller's search_path.
CREATE OR REPLACE FUNCTION search_fold(body text)
    RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    SET search_path = :"schema", pg_temp
AS $$SELECT "public".unaccent('public.unaccent'::regdictionary, body)$$""",
    r"""-- The weighted header that every search row of a document carries: title (A), tag names and
-- string, text and URL values (B). Values are cut at 100,000 characters so that a huge value
-- cannot push a row's tsvector past PostgreSQL's 1 MB limit.
CREATE OR REPLACE FUNCTION search_header(doc uuid, cfg regconfig)
    RETURNS tsvector LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$
SELECT setweight(to_tsvector(cfg, search_fold(d.title)), 'A')
    || setweight(to_tsvector(cfg, search_fold(left(concat_ws(' ',
        (SELECT string_agg(t.name, ' ') FROM document_tags dt JOIN tags t ON t.id = dt.tag_id
          WHERE dt.document_id = doc),
        (SELECT string_agg(concat_ws(' ', m.value_string, m.value_text, m.value_url), ' ')
           FROM document_metadata m WHERE m.document_id = doc)), 100000))), 'B')
  FROM documents d WHERE d.id = doc
$$""",
    r"""-- A document's search rows from scratch, in the tenant's configuration: one per part of its
-- current revision's text, or one with the header alone so that a document without text is
-- still found by title, tags and values. Also what a reindex calls after a configuration change.
-- Row by row, not INSERT ... SELECT, which Citus cannot plan in a trigger on the tenant's node.
CREATE OR REPLACE FUNCTION search_rebuild(doc uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    cfg_name text := coalesce((SELECT text_search_config FROM search_settings), 'simple');
    cfg regconfig := cfg_name::regconfig;
    revision uuid;
    header tsvector;
    part record;
    parts integer := 0;
BEGIN
    DELETE FROM document_search WHERE document_id = doc;
    SELECT current_revision_id INTO revision FROM documents WHERE id = doc;
    IF NOT FOUND THEN
        RETURN;  -- gone (purged in this statement)
    END IF;
    header := coalesce(search_header(doc, cfg), ''::tsvector);
    FOR part IN
        SELECT part_no, body FROM revision_text_parts WHERE revision_id = revision
    LOOP
        INSERT INTO document_search (document_id, part_no, config, terms)
        VALUES (doc, part.part_no, cfg_name,
                setweight(to_tsvector(cfg, search_fold(part.body)), 'D') || header);
        parts := parts + 1;
    END LOOP;
    IF parts = 0 THEN
        INSERT INTO document_search (document_id, part_no, config, terms)
        VALUES (doc, 1, cfg_name, header);
    END IF;
END
$$""",
    r"""-- Rewrites only the header of a document's rows, for a title, tag or value change: ts_filter
-- keeps the content's lexemes, so the text is never parsed again (and, content coming first,
-- its positions never move). It uses the configuration the rows were built with, so that a row
-- never mixes two configurations before a reindex rebuilds it.
CREATE OR REPLACE FUNCTION search_refresh_header(doc uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    cfg_name text;
    header tsvector;
BEGIN
    -- A document's rows are always built together, with one configuration.
    SELECT config INTO cfg_name FROM document_search WHERE document_id = doc LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    header := coalesce(search_header(doc, cfg_name::regconfig), ''::tsvector);
    UPDATE document_search SET terms = ts_filter(terms, '{d}') || header
     WHERE document_id = doc;
END
$$""",
    r"""-- A new document or a new current revision rebuilds the document's rows (the index holds
-- current revisions only); a new title only rewrites their headers.
CREATE OR REPLACE FUNCTION search_documents_changed()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.current_revision_id IS DISTINCT FROM OLD.current_revision_id THEN
        PERFORM search_rebuild(NEW.id);
    ELSIF NEW.title IS DISTINCT FROM OLD.title THEN
        PERFORM search_refresh_header(NEW.id);
    END IF;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER search_documents_changed
    AFTER INSERT OR UPDATE OF title, current_revision_id ON documents
    FOR EACH ROW
    EXECUTE FUNCTION search_documents_changed()""",
    r"""-- Tag links and metadata values are in the header: adding, removing or changing one rewrites
-- the header of the document it leaves and of the one it joins. Values of other types than
-- string, text and URL are not indexed, so they rewrite nothing.
CREATE OR REPLACE FUNCTION search_links_changed()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    indexed constant text[] := ARRAY['string', 'text', 'url'];
    old_document uuid;
    new_document uuid;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        old_document := OLD.document_id;
        -- Values of other types are not indexed: nothing to rewrite for them. (Nested: SQL
        -- does not promise to skip NEW.field_type, which document_tags lacks.)
        IF TG_TABLE_NAME = 'document_metadata' THEN
            IF NOT OLD.field_type = ANY (indexed) THEN
                old_document := NULL;
            END IF;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        new_document := NEW.document_id;
        IF TG_TABLE_NAME = 'document_metadata' THEN
            IF NOT NEW.field_type = ANY (indexed) THEN
                new_document := NULL;
            END IF;
        END IF;
    END IF;
    IF old_document IS NOT NULL THEN
        PERFORM search_refresh_header(old_document);
    END IF;
    IF new_document IS NOT NULL AND new_document IS DISTINCT FROM old_document THEN
        PERFORM search_refresh_header(new_document);
    END IF;
    RETURN NULL;
END
$$""",
    r"""-- A link's header rewrite also gives the rows their new filters, which hold the tags.
CREATE TRIGGER search_links_changed
    AFTER INSERT OR DELETE OR UPDATE ON document_tags
    FOR EACH ROW
    EXECUTE FUNCTION search_links_changed()""",
    r"""CREATE TRIGGER search_links_changed
    AFTER INSERT OR DELETE OR UPDATE ON document_metadata
    FOR EACH ROW
    EXECUTE FUNCTION search_links_changed()""",
    r"""-- A tag's name is in the header of every document that carries it: renaming the tag rewrites
-- those headers.
CREATE OR REPLACE FUNCTION search_tag_renamed()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    doc uuid;
BEGIN
    IF NEW.name IS DISTINCT FROM OLD.name THEN
        FOR doc IN SELECT document_id FROM document_tags WHERE tag_id = NEW.id LOOP
            PERFORM search_refresh_header(doc);
        END LOOP;
    END IF;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER search_tag_renamed
    AFTER UPDATE OF name ON tags
    FOR EACH ROW
    EXECUTE FUNCTION search_tag_renamed()""",
    r"""-- Newly stored text reaches the index: revision_texts is written after all of a revision's
-- parts, so its insert (or delete) rebuilds the documents whose current revision it is. Text
-- of a revision that is no longer current is not indexed.
CREATE OR REPLACE FUNCTION search_text_extracted()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    revision uuid := CASE TG_OP WHEN 'DELETE' THEN OLD.revision_id ELSE NEW.revision_id END;
    doc uuid;
BEGIN
    FOR doc IN SELECT id FROM documents WHERE current_revision_id = revision LOOP
        PERFORM search_rebuild(doc);
    END LOOP;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER search_text_extracted
    AFTER INSERT OR DELETE ON revision_texts
    FOR EACH ROW
    EXECUTE FUNCTION search_text_extracted()""",
    r"""-- What the GIN index filters a search by: the ids of the document's folder, every folder above
-- it and its tags (ids are unique across those tables). It may hold more than the truth, never
-- less: the search still checks documents. PL/pgSQL with hash and merge joins off, so that under
-- row-level security the folders are walked up by primary key, with a plan kept per session.
CREATE OR REPLACE FUNCTION search_filters(doc uuid)
    RETURNS uuid[] LANGUAGE plpgsql STABLE
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET search_path = :"schema", pg_temp
AS $$BEGIN
    RETURN (SELECT array(
    WITH RECURSIVE up (id, parent_id) AS (
        SELECT f.id, f.parent_id FROM folders f
         WHERE f.id = (SELECT d.folder_id FROM documents d WHERE d.id = doc)
        UNION
        SELECT f.id, f.parent_id FROM folders f JOIN up ON f.id = up.parent_id
    )
    SELECT id FROM up
) || array(SELECT tag_id FROM document_tags WHERE document_id = doc));
END$$""",
    r"""-- Rewrites the filters of a document's rows after a move. The array is computed first and
-- written as a value, so that on Citus the UPDATE is routed to the tenant's node as it is.
CREATE OR REPLACE FUNCTION search_refresh_filters(doc uuid)
    RETURNS void LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    current uuid[] := search_filters(doc);
BEGIN
    UPDATE document_search SET filters = current WHERE document_id = doc;
END
$$""",
    r"""-- Every search row gets its filters when it is written and whenever its header is rewritten:
-- that is how a tag link change, which rewrites the header, reaches the filters.
CREATE OR REPLACE FUNCTION search_filters_row()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    NEW.filters := search_filters(NEW.document_id);
    RETURN NEW;
END
$$""",
    r"""CREATE TRIGGER search_filters_row
    BEFORE INSERT OR UPDATE OF terms ON document_search
    FOR EACH ROW
    EXECUTE FUNCTION search_filters_row()""",
    r"""-- A document moved to another folder has another ancestry: its rows' filters are rewritten.
CREATE OR REPLACE FUNCTION search_document_moved()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    PERFORM search_refresh_filters(NEW.id);
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER search_document_moved
    AFTER UPDATE OF folder_id ON documents
    FOR EACH ROW WHEN ((old.folder_id IS DISTINCT FROM new.folder_id))
    EXECUTE FUNCTION search_document_moved()""",
    r"""-- A folder moved under another parent changes the ancestry of every document below it: their
-- rows' filters are rewritten in the moving transaction, one single-table statement per
-- document (which Citus routes to the tenant's node).
CREATE OR REPLACE FUNCTION search_folder_moved()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    folder uuid;
    doc uuid;
BEGIN
    FOR folder IN
        WITH RECURSIVE below (id) AS (
            SELECT NEW.id
            UNION
            SELECT f.id FROM folders f JOIN below ON f.parent_id = below.id
        )
        SELECT id FROM below
    LOOP
        FOR doc IN SELECT id FROM documents WHERE folder_id = folder LOOP
            PERFORM search_refresh_filters(doc);
        END LOOP;
    END LOOP;
    RETURN NULL;
END
$$""",
    r"""CREATE TRIGGER search_folder_moved
    AFTER UPDATE OF parent_id ON folders
    FOR EACH ROW WHEN ((old.parent_id IS DISTINCT FROM new.parent_id))
    EXECUTE FUNCTION search_folder_moved()""",
    r"""-- The rows matching a content search (within the given folders and tags) of live documents the
-- actor may view, with their ranks. SECURITY DEFINER so that the GIN index serves the words under
-- row-level security (@@ is not leakproof), with the documents' policy rule written out here. A
-- common word is narrowed to the actor's folder scopes in the index when estimates favour it.
CREATE OR REPLACE FUNCTION search_visible_parts(q tsquery, in_order tsquery, within_all uuid[], within_any uuid[], max_rows integer)
    RETURNS TABLE(document_id uuid, rank double precision) LANGUAGE plpgsql STABLE SECURITY DEFINER ROWS 100
    SET enable_mergejoin TO 'off'
    SET enable_hashjoin TO 'off'
    SET search_path = :"schema", pg_temp
AS $$
#variable_conflict use_column
DECLARE
    scopes uuid[];
    share double precision;
    matches double precision;
    returned bigint;
    found bigint;
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
        scopes := array(SELECT DISTINCT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (access_principals()) AND NOT g.on_document AND g.rights & 1 = 1);
        IF NOT '00000000-0000-0000-0000-000000000000'::uuid = ANY (scopes) THEN
            share := search_scope_share(scopes);
        END IF;
        IF share IS NOT NULL AND search_narrows(matches, max_rows, share) THEN
            IF cardinality(within_all) = 0 AND cardinality(within_any) = 0 THEN
            RETURN QUERY
                SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                  FROM (SELECT s.document_id, s.terms FROM document_search s
                         WHERE s.terms @@ q AND s.filters && scopes  OFFSET 0) s
                  JOIN documents d ON d.id = s.document_id
                 WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                 LIMIT max_rows;
            GET DIAGNOSTICS returned = ROW_COUNT;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope = s.document_id
                       AND s.terms @@ q  AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
                GET DIAGNOSTICS found = ROW_COUNT;
                returned := returned + found;
            END IF;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope <> s.document_id AND s.document_id IN (SELECT o.id FROM documents o WHERE o.owner_id = (SELECT access_user()))
                       AND s.terms @@ q  AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
            END IF;
            ELSIF cardinality(within_any) = 0 THEN
            RETURN QUERY
                SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                  FROM (SELECT s.document_id, s.terms FROM document_search s
                         WHERE s.terms @@ q AND s.filters && scopes AND s.filters @> within_all OFFSET 0) s
                  JOIN documents d ON d.id = s.document_id
                 WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                 LIMIT max_rows;
            GET DIAGNOSTICS returned = ROW_COUNT;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope = s.document_id
                       AND s.terms @@ q AND s.filters @> within_all AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
                GET DIAGNOSTICS found = ROW_COUNT;
                returned := returned + found;
            END IF;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope <> s.document_id AND s.document_id IN (SELECT o.id FROM documents o WHERE o.owner_id = (SELECT access_user()))
                       AND s.terms @@ q AND s.filters @> within_all AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
            END IF;
            ELSIF cardinality(within_all) = 0 THEN
            RETURN QUERY
                SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                  FROM (SELECT s.document_id, s.terms FROM document_search s
                         WHERE s.terms @@ q AND s.filters && scopes AND s.filters && within_any OFFSET 0) s
                  JOIN documents d ON d.id = s.document_id
                 WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                 LIMIT max_rows;
            GET DIAGNOSTICS returned = ROW_COUNT;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope = s.document_id
                       AND s.terms @@ q AND s.filters && within_any AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
                GET DIAGNOSTICS found = ROW_COUNT;
                returned := returned + found;
            END IF;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope <> s.document_id AND s.document_id IN (SELECT o.id FROM documents o WHERE o.owner_id = (SELECT access_user()))
                       AND s.terms @@ q AND s.filters && within_any AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
            END IF;
            ELSE
            RETURN QUERY
                SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                  FROM (SELECT s.document_id, s.terms FROM document_search s
                         WHERE s.terms @@ q AND s.filters && scopes AND s.filters @> within_all AND s.filters && within_any OFFSET 0) s
                  JOIN documents d ON d.id = s.document_id
                 WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                 LIMIT max_rows;
            GET DIAGNOSTICS returned = ROW_COUNT;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope = s.document_id
                       AND s.terms @@ q AND s.filters @> within_all AND s.filters && within_any AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
                GET DIAGNOSTICS found = ROW_COUNT;
                returned := returned + found;
            END IF;
            IF max_rows IS NULL OR returned < max_rows THEN
                RETURN QUERY
                    SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
                      FROM document_search s JOIN documents d ON d.id = s.document_id
                     WHERE s.access_scope <> s.document_id AND s.document_id IN (SELECT o.id FROM documents o WHERE o.owner_id = (SELECT access_user()))
                       AND s.terms @@ q AND s.filters @> within_all AND s.filters && within_any AND NOT s.filters && scopes
                       AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
                     LIMIT max_rows - returned;
            END IF;
            END IF;
            RETURN;
        END IF;
    END IF;
    IF cardinality(within_all) = 0 AND cardinality(within_any) = 0 THEN
        RETURN QUERY
            SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
              FROM (SELECT s.document_id, s.terms FROM document_search s WHERE s.terms @@ q  AND ((SELECT pg_trigger_depth() > 0 OR access_system()) OR s.owner_id = (SELECT access_user()) OR s.access_scope = s.document_id OR s.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OFFSET 0) s JOIN documents d ON d.id = s.document_id
             WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
             LIMIT max_rows;
    ELSIF cardinality(within_any) = 0 THEN
        RETURN QUERY
            SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
              FROM (SELECT s.document_id, s.terms FROM document_search s WHERE s.terms @@ q AND s.filters @> within_all AND ((SELECT pg_trigger_depth() > 0 OR access_system()) OR s.owner_id = (SELECT access_user()) OR s.access_scope = s.document_id OR s.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OFFSET 0) s JOIN documents d ON d.id = s.document_id
             WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
             LIMIT max_rows;
    ELSIF cardinality(within_all) = 0 THEN
        RETURN QUERY
            SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
              FROM (SELECT s.document_id, s.terms FROM document_search s WHERE s.terms @@ q AND s.filters && within_any AND ((SELECT pg_trigger_depth() > 0 OR access_system()) OR s.owner_id = (SELECT access_user()) OR s.access_scope = s.document_id OR s.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OFFSET 0) s JOIN documents d ON d.id = s.document_id
             WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
             LIMIT max_rows;
    ELSE
        RETURN QUERY
            SELECT s.document_id, ts_rank_cd(s.terms, q, 1)::double precision + CASE WHEN in_order IS NOT NULL AND s.terms @@ in_order THEN 1000 ELSE 0 END
              FROM (SELECT s.document_id, s.terms FROM document_search s WHERE s.terms @@ q AND s.filters @> within_all AND s.filters && within_any AND ((SELECT pg_trigger_depth() > 0 OR access_system()) OR s.owner_id = (SELECT access_user()) OR s.access_scope = s.document_id OR s.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OFFSET 0) s JOIN documents d ON d.id = s.document_id
             WHERE d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
             LIMIT max_rows;
    END IF;
END
$$""",
    r"""-- The live documents the actor may view whose title matches an ILIKE pattern. SECURITY DEFINER
-- so that the trigram index serves the pattern under row-level security (ILIKE is not
-- leakproof); the documents' policy rule is written out here.
CREATE OR REPLACE FUNCTION search_visible_titles(pattern text)
    RETURNS SETOF uuid LANGUAGE sql STABLE SECURITY DEFINER ROWS 100
    SET search_path = :"schema", pg_temp
AS $$
SELECT d.id FROM documents d
 WHERE d.title ILIKE pattern ESCAPE '\' AND d.deleted_at IS NULL AND (
    (SELECT pg_trigger_depth() > 0 OR access_system()) OR d.owner_id = (SELECT access_user()) OR (d.access_scope <> d.id AND d.access_scope IN (SELECT g.scope_id FROM access_grants g WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND NOT g.on_document AND g.rights & 1 = 1)) OR (d.access_scope = d.id AND EXISTS (SELECT 1 FROM access_grants g WHERE g.scope_id = d.id AND g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[])) AND g.rights & 1 = 1 OFFSET 0))
)
$$""",
    r"""-- The estimated share of the tenant's documents under the given scopes, from the statistics of
-- documents.access_scope (NULL without statistics: the search then reads every match). pg_stats
-- shows them only to a role that passes row-level security: the search function's owner, whose
-- rights this runs with. PL/pgSQL, so that its plan over pg_stats is kept for the session.
CREATE OR REPLACE FUNCTION search_scope_share(scopes uuid[])
    RETURNS double precision LANGUAGE plpgsql STABLE
    SET search_path = :"schema", pg_temp
AS $$BEGIN
    RETURN (SELECT mcv.common + greatest(1 - s.null_frac - coalesce(mcv.all_common, 0), 0)
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
   AND s.attname = 'access_scope' AND c.oid = 'documents'::regclass);
END$$""",
    r"""-- How many rows the planner expects the words (within the filters) to match: only a word with
-- more matches than the search ranks makes narrowing to the actor's scopes worth considering.
-- Left volatile: PostgreSQL runs no EXPLAIN in a function that promises not to write.
CREATE OR REPLACE FUNCTION search_matches(q tsquery, within_all uuid[], within_any uuid[])
    RETURNS double precision LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    plan json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT 1 FROM document_search s WHERE s.terms @@ $1'
        || CASE WHEN cardinality(within_all) > 0 THEN ' AND s.filters @> $2' ELSE '' END
        || CASE WHEN cardinality(within_any) > 0 THEN ' AND s.filters && $3' ELSE '' END
        INTO plan USING q, within_all, within_any;
    RETURN (plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
END
$$""",
    r"""-- Whether narrowing to the actor's folder scopes reads fewer rows, by estimates: the plain path
-- reads matches until max_rows are visible (all, if fewer); the narrowed one reads the scopes'
-- posting lists (about one match's work per 125 documents under them) and the matches there.
CREATE OR REPLACE FUNCTION search_narrows(matches double precision, max_rows integer, share double precision)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    RETURN (SELECT share * greatest(c.reltuples, 0) / 125 + share * matches
              FROM pg_class c WHERE c.oid = 'documents'::regclass)
           < least(matches, max_rows / greatest(share, 1e-9));
END
$$""",
    r"""-- A new search row takes its document's scope and owner, so that a search skips the matches the
-- actor may not view without reading their documents. For a missing document the scope stays
-- NULL, so that the foreign key refuses the row by its name, not a NOT NULL constraint.
CREATE OR REPLACE FUNCTION search_access_row()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    SELECT d.access_scope, d.owner_id INTO NEW.access_scope, NEW.owner_id
      FROM documents d WHERE d.id = NEW.document_id;
    RETURN NEW;
END
$$""",
    r"""CREATE TRIGGER search_access_row
    BEFORE INSERT ON document_search
    FOR EACH ROW
    EXECUTE FUNCTION search_access_row()""",
    r"""-- A document's new scope or owner goes to its search rows. The documents' rule still decides
-- every match, so a copy out of step could only hide a document, never show one.
CREATE OR REPLACE FUNCTION search_access_changed()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    UPDATE document_search SET access_scope = NEW.access_scope, owner_id = NEW.owner_id
     WHERE document_id = NEW.id;
    RETURN NULL;
END
$$""",
    r"""-- Also on folder_id: a move sets access_scope in a BEFORE trigger, unseen by UPDATE OF.
CREATE TRIGGER search_access_changed
    AFTER UPDATE OF folder_id, access_scope, owner_id ON documents
    FOR EACH ROW WHEN (((old.access_scope IS DISTINCT FROM new.access_scope) OR (old.owner_id IS DISTINCT FROM new.owner_id)))
    EXECUTE FUNCTION search_access_changed()""",
)


def upgrade(*, scope: MigrationScope) -> None:
    del scope  # the texts above describe what the schema already holds


def downgrade(*, scope: MigrationScope) -> None:
    del scope
