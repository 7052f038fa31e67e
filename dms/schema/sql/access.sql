-- Access control: who may view and change which folders and documents. Users are members of the
-- tenant's groups; a folder's or document's owner (its creator) holds every right on it. Access
-- entries grant a user, a group or everyone (the nil uuid) rights on a folder, a document or the
-- root: view=1, edit=2, delete=4, manage=8 (each implies view), inherited down the folder tree
-- unless a folder stops inheriting. Triggers derive access_scopes from them (the root, folders with
-- entries or that stop inheriting, documents with entries: each row's access_scope names the one
-- it falls under) and access_grants (each scope's rights per principal): no read walks the tree.
-- The actor is the transaction-local dms.actor: a user's uuid, or system:<name> for a system
-- principal, which holds every right. A write without the right it needs raises 42501; what the
-- actor may not view is invisible to them (the row-level security at the end of this file).

-- The acting user: dms.actor as a uuid, or NULL for a system principal or when nobody is named.
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
$$;

-- Whether a named system principal (dms.actor 'system:<name>') acts: it holds every right, by
-- name, so the code that uses one says so and the audit trail records it.
CREATE OR REPLACE FUNCTION access_system()
    RETURNS boolean LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$SELECT coalesce(current_setting('dms.actor', true), '') LIKE 'system:%'$$;

-- Everyone the actor's rights come from: everyone (the nil uuid), the acting user and the groups
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
$$;

-- Whether the actor holds every right of `wanted` on an object under `scope` owned by `owner`:
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
$$;

-- The names of the rights a mask asks for, for the message of a refusal. View is named only when
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
$$;

-- Refuse (SQLSTATE 42501, which the library raises as PermissionDenied) unless the actor holds
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
$$;

-- The scope that an object placed in `folder` falls under: the folder's own scope, or the root's
-- for the top level (NULL). A folder that does not exist also gives the root's: its foreign key
-- refuses the row anyway.
CREATE OR REPLACE FUNCTION access_folder_scope(folder uuid)
    RETURNS uuid LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$
SELECT coalesce((SELECT f.access_scope FROM folders f WHERE f.id = folder), '00000000-0000-0000-0000-000000000000'::uuid)
$$;

-- The owner of `folder`, whose rights on it count for what is created in or moved into it; the
-- root (NULL) has no owner.
CREATE OR REPLACE FUNCTION access_folder_owner(folder uuid)
    RETURNS uuid LANGUAGE sql STABLE
    SET search_path = :"schema", pg_temp
AS $$SELECT f.owner_id FROM folders f WHERE f.id = folder$$;

-- Refuse unless the actor holds `wanted` on `folder` (the root for NULL): creating or moving an
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
$$;

-- Add a user that an access row names (an owner, an entry's or a membership's user) to
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
$$;

-- Recompute a scope's grants, then those of every scope inheriting from it: its own entries, with
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
$$;

-- Point the rows under `folder` (itself included) that fell under `old_scope` to `new_scope`, and
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
$$;

-- Make a folder a scope of its own when it gets entries or stops inheriting: what below it fell
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
$$;

-- Make a document a scope of its own when it gets entries ("shared with"): it inherits from its
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
$$;

-- Before a folder is written: a new one is owned by its creator and falls under its parent's
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
$$;

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON folders
    FOR EACH ROW
    EXECUTE FUNCTION access_folder_rules();

-- After a folder is created, moved or switches inheritance: keep the derived scopes and grants. A
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
$$;

-- A new folder that does not inherit is a scope from the start.
CREATE TRIGGER access_placed
    AFTER INSERT ON folders
    FOR EACH ROW
    EXECUTE FUNCTION access_folder_changed();

-- Only a move or an inheritance switch changes which scope a folder's subtree falls under.
CREATE TRIGGER access_moved
    AFTER UPDATE OF parent_id, inherits ON folders
    FOR EACH ROW WHEN (((old.parent_id IS DISTINCT FROM new.parent_id) OR (old.inherits IS DISTINCT FROM new.inherits)))
    EXECUTE FUNCTION access_folder_changed();

-- Before a document is written: a new one is owned by its creator and falls under its folder's
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
$$;

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON documents
    FOR EACH ROW
    EXECUTE FUNCTION access_document_rules();

-- After a document with entries of its own moves: its scope now inherits from its new folder's,
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
$$;

CREATE TRIGGER access_moved
    AFTER UPDATE OF folder_id ON documents
    FOR EACH ROW WHEN ((old.folder_id IS DISTINCT FROM new.folder_id))
    EXECUTE FUNCTION access_document_moved();

-- A folder or document deleted for good takes its scope (and with it its grants) along, so no
-- derived row outlives its object.
CREATE OR REPLACE FUNCTION access_object_deleted()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    DELETE FROM access_scopes WHERE id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER access_deleted
    AFTER DELETE ON folders
    FOR EACH ROW
    EXECUTE FUNCTION access_object_deleted();

CREATE TRIGGER access_deleted
    AFTER DELETE ON documents
    FOR EACH ROW
    EXECUTE FUNCTION access_object_deleted();

-- Before a row that belongs to a document (a revision, a tag link, a metadata value, a text) is
-- written, the actor needs edit on the document: for an update, on the row's document before and
-- after, so that no row moves from a document the actor may only view. TG_ARGV[0] names the column that leads to the
-- document: document_id, or revision_id through the revision. A missing document is left to the
-- foreign key; the database's own triggers and system principals pass.
CREATE OR REPLACE FUNCTION access_content_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    written jsonb;
    doc uuid;
    doc_scope uuid;
    doc_owner uuid;
BEGIN
    IF pg_trigger_depth() > 1 OR access_system() THEN
        RETURN coalesce(NEW, OLD);
    END IF;
    -- The row as it was and as it becomes: an update that moves it needs edit on both sides.
    FOREACH written IN ARRAY array_remove(ARRAY[to_jsonb(OLD), to_jsonb(NEW)], NULL) LOOP
        IF TG_ARGV[0] = 'revision_id' THEN
            SELECT r.document_id INTO doc FROM file_revisions r
             WHERE r.id = (written ->> 'revision_id')::uuid;
        ELSE
            doc := (written ->> 'document_id')::uuid;
        END IF;
        SELECT d.access_scope, d.owner_id INTO doc_scope, doc_owner
          FROM documents d WHERE d.id = doc;
        IF FOUND THEN
            PERFORM access_require(doc_scope, doc_owner, 2, 'edit', 'document ' || doc);
        END IF;
    END LOOP;
    RETURN coalesce(NEW, OLD);
END
$$;

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id');

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON document_tags
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id');

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON document_metadata
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id');

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON document_metadata_choices
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('document_id');

-- A text leads to its document through its revision.
CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON revision_texts
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('revision_id');

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON revision_text_parts
    FOR EACH ROW
    EXECUTE FUNCTION access_content_rules('revision_id');

-- Before an access entry is written (a grant or a revoke): the actor needs manage on its object,
-- the root's for an entry on neither folder nor document; an update needs it on the object before
-- and after, so that no entry is taken from an object the actor does not manage. The entry's user is enlisted first; an
-- object that does not exist is left to the foreign key.
CREATE OR REPLACE FUNCTION access_entry_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    entry access_entries;
    object_scope uuid;
    object_owner uuid;
BEGIN
    IF TG_OP <> 'DELETE' THEN
        PERFORM access_enlist(NEW.user_id);
    END IF;
    IF pg_trigger_depth() > 1 OR access_system() THEN
        RETURN coalesce(NEW, OLD);
    END IF;
    -- The entry as it was and as it becomes: moving one needs manage on both objects.
    FOREACH entry IN ARRAY array_remove(ARRAY[OLD, NEW], NULL) LOOP
        object_scope := '00000000-0000-0000-0000-000000000000'::uuid;
        object_owner := NULL;
        IF entry.folder_id IS NOT NULL THEN
            SELECT f.access_scope, f.owner_id INTO object_scope, object_owner
              FROM folders f WHERE f.id = entry.folder_id;
        ELSIF entry.document_id IS NOT NULL THEN
            SELECT d.access_scope, d.owner_id INTO object_scope, object_owner
              FROM documents d WHERE d.id = entry.document_id;
        END IF;
        -- No such object (object_scope NULL): the foreign key says so.
        IF object_scope IS NOT NULL THEN
            PERFORM access_require(object_scope, object_owner, 8, 'manage',
                coalesce('folder ' || entry.folder_id, 'document ' || entry.document_id,
                         'the root'));
        END IF;
    END LOOP;
    RETURN coalesce(NEW, OLD);
END
$$;

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_entries
    FOR EACH ROW
    EXECUTE FUNCTION access_entry_rules();

-- Before a row of import provenance is written: the actor needs edit on the folder or document it
-- records (on both, for an update that moves it), since it names the object's source, its content's
-- hash and who imported it. A missing object is left to the foreign key.
CREATE OR REPLACE FUNCTION access_provenance_rules()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    entry import_provenance;
    object_scope uuid;
    object_owner uuid;
BEGIN
    IF pg_trigger_depth() > 1 OR access_system() THEN
        RETURN coalesce(NEW, OLD);
    END IF;
    FOREACH entry IN ARRAY array_remove(ARRAY[OLD, NEW], NULL) LOOP
        object_scope := NULL;
        IF entry.folder_id IS NOT NULL THEN
            SELECT f.access_scope, f.owner_id INTO object_scope, object_owner
              FROM folders f WHERE f.id = entry.folder_id;
        ELSE
            SELECT d.access_scope, d.owner_id INTO object_scope, object_owner
              FROM documents d WHERE d.id = entry.document_id;
        END IF;
        IF object_scope IS NOT NULL THEN
            PERFORM access_require(object_scope, object_owner, 2, 'edit',
                coalesce('folder ' || entry.folder_id, 'document ' || entry.document_id));
        END IF;
    END LOOP;
    RETURN coalesce(NEW, OLD);
END
$$;

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON import_provenance
    FOR EACH ROW
    EXECUTE FUNCTION access_provenance_rules();

-- After an access entry is written: its object becomes a scope if it was not, and the grants of
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
$$;

CREATE TRIGGER access_changed
    AFTER INSERT OR DELETE OR UPDATE ON access_entries
    FOR EACH ROW
    EXECUTE FUNCTION access_entry_changed();

-- Changes to the whole tenant need manage at the root: its groups and memberships, and deleting a
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
$$;

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_groups
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules();

-- A membership names a user, enlisted before the foreign key checks it.
CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_group_members
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules('user_id');

-- Adding and renaming tags, fields and options is anyone's; deleting one needs manage.
CREATE TRIGGER access_rules
    BEFORE DELETE ON tags
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules();

CREATE TRIGGER access_rules
    BEFORE DELETE ON metadata_fields
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules();

CREATE TRIGGER access_rules
    BEFORE DELETE ON metadata_field_options
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules();

-- A tenant's settings (whether reads are recorded, the text search configuration) are the
-- root's: changing them needs manage there.
CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON audit_settings
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules();

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON search_settings
    FOR EACH ROW
    EXECUTE FUNCTION access_root_rules();

-- access_scopes and access_grants are derived from the entries: only the database's triggers
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
$$;

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_scopes
    FOR EACH ROW
    EXECUTE FUNCTION access_derived_only();

CREATE TRIGGER access_rules
    BEFORE INSERT OR DELETE OR UPDATE ON access_grants
    FOR EACH ROW
    EXECUTE FUNCTION access_derived_only();

-- Row-level security: who may see which rows. Every table that holds a document's or a folder's
-- content is forced (the tables' owner is held to it too), and each has one policy. The acting
-- user is the transaction-local dms.actor (access_user, access_principals); a system principal
-- (access_system) and the tenant's own triggers see every row.
--
-- Each policy's comment names the function its condition becomes on Citus (rules.py): Citus
-- refuses subqueries in the policies of distributed tables.

-- A folder is visible to its owner and to whoever holds "view" on its scope (an entry on it or
-- inherited from above). The scopes the actor views are read once per statement.
ALTER TABLE folders ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_object_visible(owner_id uuid, access_scope uuid)
CREATE POLICY access_visible ON folders USING (
    (SELECT pg_trigger_depth() > 0 OR access_system())
    OR owner_id = (SELECT access_user())
    OR access_scope IN (
        SELECT g.scope_id FROM access_grants g
         WHERE g.principal_id = ANY (CAST((SELECT access_principals()) AS uuid[]))
           AND NOT g.on_document AND g.rights & 1 = 1)
);

-- A document is visible to its owner; under its folder's scope, as that scope is (the set of
-- folder scopes the actor views, read once per statement); a document with entries of its own
-- is its own scope, probed by primary key row by row (OFFSET 0 keeps the probe from being
-- hashed into a set of every document scope the actor holds).
ALTER TABLE documents ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_document_row_visible(id uuid, owner_id uuid, access_scope uuid)
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
);

-- A document's revisions, tags, metadata values and search rows are visible with the document
-- (its own policy decides, inside the EXISTS).
ALTER TABLE file_revisions ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON file_revisions USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
);

ALTER TABLE document_tags ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_tags USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
);

ALTER TABLE document_metadata ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_metadata USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
);

ALTER TABLE document_metadata_choices ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_metadata_choices USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
);

ALTER TABLE document_search ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_document_visible(document_id uuid)
CREATE POLICY access_visible ON document_search USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
);

-- A revision's extracted text and its parts are visible with the revision (so with its
-- document).
ALTER TABLE revision_texts ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_revision_visible(revision_id uuid)
CREATE POLICY access_visible ON revision_texts USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".file_revisions r WHERE r.id = revision_id)
);

ALTER TABLE revision_text_parts ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_revision_visible(revision_id uuid)
CREATE POLICY access_visible ON revision_text_parts USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".file_revisions r WHERE r.id = revision_id)
);

-- An access entry is visible with the folder or document it is on; the root's entries (on
-- neither) to everyone.
ALTER TABLE access_entries ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_entry_visible(folder_id uuid, document_id uuid)
CREATE POLICY access_visible ON access_entries USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR (folder_id IS NULL AND document_id IS NULL)
    OR EXISTS (SELECT 1 FROM :"schema".folders f WHERE f.id = folder_id)
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
);

-- Import provenance is visible with the folder or document it records.
ALTER TABLE import_provenance ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_provenance_visible(folder_id uuid, document_id uuid)
CREATE POLICY access_visible ON import_provenance USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR EXISTS (SELECT 1 FROM :"schema".folders f WHERE f.id = folder_id)
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
);

-- A scope is visible with the folder or document it is (the root's to everyone): which objects
-- have rules of their own, and which of them stop inheriting, is nobody else's business. (IN, not
-- EXISTS: in a subquery on folders or documents a bare id would be theirs, not the scope's.)
ALTER TABLE access_scopes ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_scope_visible(id uuid)
CREATE POLICY access_visible ON access_scopes USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR id = '00000000-0000-0000-0000-000000000000'::uuid
    OR id IN (SELECT f.id FROM :"schema".folders f)
    OR id IN (SELECT d.id FROM :"schema".documents d)
);

-- A grant (derived from the entries) is visible to the principals it names: every policy reads
-- the actor's own grants and nothing else, and nobody learns who may do what elsewhere.
ALTER TABLE access_grants ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_grant_visible(principal_id uuid)
CREATE POLICY access_visible ON access_grants USING (
    (SELECT pg_trigger_depth() > 0 OR access_system())
    OR principal_id = ANY (CAST((SELECT access_principals()) AS uuid[]))
);

-- An audit event is visible with its document, folder or access entry; events about neither
-- (tags, fields, groups) to everyone.
ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- on citus: access_event_visible(object_type text, object_id uuid, document_id uuid)
CREATE POLICY access_visible ON audit_events USING (
    (SELECT pg_trigger_depth() > 0 OR :"schema".access_system())
    OR (document_id IS NULL AND object_type NOT IN ('folder', 'access_entry'))
    OR EXISTS (SELECT 1 FROM :"schema".documents d WHERE d.id = document_id)
    OR (object_type = 'folder'
        AND EXISTS (SELECT 1 FROM :"schema".folders f WHERE f.id = object_id))
    OR (object_type = 'access_entry'
        AND EXISTS (SELECT 1 FROM :"schema".access_entries e WHERE e.id = object_id))
);
