-- Folders: the folder tree has no cycle and at most 32 levels. Both are guarded in the database,
-- so no code path (the library, a migration, raw SQL) can move a folder under its own descendant
-- or nest the tree too deep. Refusals carry their own SQLSTATE: 23M03 folders_no_cycle, 23M04
-- folders_max_depth.

-- Checks a new or changed parent: the walk up from the parent must not reach the folder itself,
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
$$;

CREATE TRIGGER folders_guard
    BEFORE INSERT OR UPDATE OF parent_id ON folders
    FOR EACH ROW
    EXECUTE FUNCTION folders_guard();

