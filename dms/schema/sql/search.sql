-- Content search, held whole in the tenant's schema (on Citus it lives on the tenant's node).
-- document_search has one row per part of a document's current extracted text: terms, the
-- part's tsvector (weight D) followed by a weighted header of the title (A) and the tag names
-- and string, text and URL metadata values (B); filters, the ids of the document's folder, every
-- folder above it and its tags, so that the GIN index applies folder and tag filters itself; and
-- a copy of the document's access scope and owner. Triggers write these rows in the transaction
-- that changes the text, title, tags or values they index, raw SQL included, so the index never
-- drifts and a rollback leaves it as it was. The search functions read it as their owner, for
-- the indexes to serve under row-level security, and apply the rule of the documents' policy
-- themselves: a caller finds exactly the documents the policies let it view.

-- Accent folding for both sides of a search: the indexed text and the query's words go through
-- this one function, so an unaccented word finds its accented spelling. unaccent's dictionary
-- is named with its schema so that the result never depends on the caller's search_path.
CREATE OR REPLACE FUNCTION search_fold(body text)
    RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    SET search_path = :"schema", pg_temp
AS $$SELECT "public".unaccent('public.unaccent'::regdictionary, body)$$;

-- The weighted header that every search row of a document carries: title (A), tag names and
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
$$;

-- A document's search rows from scratch, in the tenant's configuration: one per part of its
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
$$;

-- Rewrites only the header of a document's rows, for a title, tag or value change: ts_filter
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
$$;

-- A new document or a new current revision rebuilds the document's rows (the index holds
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
$$;

CREATE TRIGGER search_documents_changed
    AFTER INSERT OR UPDATE OF title, current_revision_id ON documents
    FOR EACH ROW
    EXECUTE FUNCTION search_documents_changed();

-- Tag links and metadata values are in the header: adding, removing or changing one rewrites
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
$$;

-- A link's header rewrite also gives the rows their new filters, which hold the tags.
CREATE TRIGGER search_links_changed
    AFTER INSERT OR DELETE OR UPDATE ON document_tags
    FOR EACH ROW
    EXECUTE FUNCTION search_links_changed();

CREATE TRIGGER search_links_changed
    AFTER INSERT OR DELETE OR UPDATE ON document_metadata
    FOR EACH ROW
    EXECUTE FUNCTION search_links_changed();

-- A tag's name is in the header of every document that carries it: renaming the tag rewrites
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
$$;

CREATE TRIGGER search_tag_renamed
    AFTER UPDATE OF name ON tags
    FOR EACH ROW
    EXECUTE FUNCTION search_tag_renamed();

-- Newly stored text reaches the index: revision_texts is written after all of a revision's
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
$$;

CREATE TRIGGER search_text_extracted
    AFTER INSERT OR DELETE ON revision_texts
    FOR EACH ROW
    EXECUTE FUNCTION search_text_extracted();

-- What the GIN index filters a search by: the ids of the document's folder, every folder above
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
END$$;

-- Rewrites the filters of a document's rows after a move. The array is computed first and
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
$$;

-- Every search row gets its filters when it is written and whenever its header is rewritten:
-- that is how a tag link change, which rewrites the header, reaches the filters.
CREATE OR REPLACE FUNCTION search_filters_row()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    NEW.filters := search_filters(NEW.document_id);
    RETURN NEW;
END
$$;

CREATE TRIGGER search_filters_row
    BEFORE INSERT OR UPDATE OF terms ON document_search
    FOR EACH ROW
    EXECUTE FUNCTION search_filters_row();

-- A document moved to another folder has another ancestry: its rows' filters are rewritten.
CREATE OR REPLACE FUNCTION search_document_moved()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    PERFORM search_refresh_filters(NEW.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER search_document_moved
    AFTER UPDATE OF folder_id ON documents
    FOR EACH ROW WHEN ((old.folder_id IS DISTINCT FROM new.folder_id))
    EXECUTE FUNCTION search_document_moved();

-- A folder moved under another parent changes the ancestry of every document below it: their
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
$$;

CREATE TRIGGER search_folder_moved
    AFTER UPDATE OF parent_id ON folders
    FOR EACH ROW WHEN ((old.parent_id IS DISTINCT FROM new.parent_id))
    EXECUTE FUNCTION search_folder_moved();

-- The rows matching a content search (within the given folders and tags) of live documents the
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
$$;

-- The live documents the actor may view whose title matches an ILIKE pattern. SECURITY DEFINER
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
$$;

-- The estimated share of the tenant's documents under the given scopes, from the statistics of
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
END$$;

-- How many rows the planner expects the words (within the filters) to match: only a word with
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
$$;

-- Whether narrowing to the actor's folder scopes reads fewer rows, by estimates: the plain path
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
$$;

-- A new search row takes its document's scope and owner, so that a search skips the matches the
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
$$;

CREATE TRIGGER search_access_row
    BEFORE INSERT ON document_search
    FOR EACH ROW
    EXECUTE FUNCTION search_access_row();

-- The search rows are derived (from the documents, their texts, tags and values) and written
-- only by the triggers above, or by a system principal rebuilding them: a statement that writes
-- them itself is refused, so that nobody rewrites a document's words or hides it from everyone's
-- search. A trigger depth above 1 is one of the tenant's own triggers: the application's role
-- can create none (docs/security.md).
CREATE OR REPLACE FUNCTION search_rows_guard()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF pg_trigger_depth() = 1 AND NOT access_system() THEN
        RAISE EXCEPTION 'document_search is kept by the database: change the document, its text, tags or values instead'
            USING ERRCODE = '42501';
    END IF;
    RETURN coalesce(NEW, OLD);
END
$$;

CREATE TRIGGER search_rows_guard
    BEFORE INSERT OR DELETE OR UPDATE ON document_search
    FOR EACH ROW
    EXECUTE FUNCTION search_rows_guard();

-- A document's new scope or owner goes to its search rows. The documents' rule still decides
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
$$;

-- Also on folder_id: a move sets access_scope in a BEFORE trigger, unseen by UPDATE OF.
CREATE TRIGGER search_access_changed
    AFTER UPDATE OF folder_id, access_scope, owner_id ON documents
    FOR EACH ROW WHEN (((old.access_scope IS DISTINCT FROM new.access_scope) OR (old.owner_id IS DISTINCT FROM new.owner_id)))
    EXECUTE FUNCTION search_access_changed();

