-- Audit: the trail is append-only and verifiable. Events are written by the database in the
-- transaction of the change (row triggers on the audited tables, statement triggers on the link
-- tables), so raw SQL is recorded too and a rolled-back change leaves no event. The actor comes
-- from the transaction-local setting dms.actor, never from the inserting statement. Sealing,
-- after commit, chains events into the tenant's hash chain (head in audit_chain, pruning cuts in
-- audit_checkpoints); writers only insert unsealed events, so they never wait on each other or
-- on the chain's head. Events cannot be updated or deleted, except sealing an event once and
-- pruning events at or below a checkpoint; checkpoints are never changed or deleted.

-- Fills in who, when, which transaction and context on every inserted event, whatever the
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
$$;

CREATE TRIGGER audit_stamp
    BEFORE INSERT ON audit_events
    FOR EACH ROW
    EXECUTE FUNCTION audit_stamp();

-- Keeps events append-only: an update may only seal an unsealed event (set seq, hash and
-- sealed_at once, everything else unchanged) at a position after the chain's head, and a delete
-- is only pruning, of a sealed event at or below the newest checkpoint. Anything else is refused
-- with SQLSTATE 23M05. (A position at or before the head, such as -1, would let the event be
-- deleted as if pruned: the change it records would leave no trace.)
CREATE OR REPLACE FUNCTION audit_guard()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
DECLARE
    unsealed audit_events;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.seq IS NOT NULL AND OLD.seq <= (SELECT max(seq) FROM audit_checkpoints) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit events are append-only: event % is not below a checkpoint', OLD.id
            USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
    END IF;
    unsealed := NEW;
    unsealed.seq := NULL;
    unsealed.hash := NULL;
    unsealed.sealed_at := NULL;
    IF OLD.seq IS NULL AND NEW.seq > (SELECT c.last_seq FROM audit_chain c)
       AND unsealed IS NOT DISTINCT FROM OLD THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit events are append-only: event % cannot be changed', OLD.id
        USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
END
$$;

CREATE TRIGGER audit_guard
    BEFORE DELETE OR UPDATE ON audit_events
    FOR EACH ROW
    EXECUTE FUNCTION audit_guard();

-- Refuses outright, with SQLSTATE 23M05: truncating events or checkpoints, and changing or
-- deleting a checkpoint (where pruning cut the chain, which verification starts from).
CREATE OR REPLACE FUNCTION audit_refuse()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
END
$$;

-- TRUNCATE fires no row trigger, so audit_guard never sees it: it is refused per statement.
CREATE TRIGGER audit_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_refuse();

-- A checkpoint is where pruning cut the chain, and verification starts from it: it is made only
-- by pruning (a system principal), at a sealed event and with that event's hash, after every
-- earlier checkpoint; how many events it prunes and when are recorded by the database, not
-- told. A checkpoint made any other way would let events be deleted as if pruned.
CREATE OR REPLACE FUNCTION audit_checkpoint_guard()
    RETURNS trigger LANGUAGE plpgsql
    SET search_path = :"schema", pg_temp
AS $$
BEGIN
    IF NOT access_system() THEN
        RAISE EXCEPTION 'a checkpoint is made by pruning the audit trail, as a system principal'
            USING ERRCODE = '42501';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM audit_events e WHERE e.seq = NEW.seq AND e.hash = NEW.hash) THEN
        RAISE EXCEPTION 'a checkpoint is a sealed event: no event % with that hash', NEW.seq
            USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
    END IF;
    IF NEW.seq <= coalesce((SELECT max(k.seq) FROM audit_checkpoints k), 0) THEN
        RAISE EXCEPTION 'a checkpoint comes after every earlier one: % does not', NEW.seq
            USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
    END IF;
    NEW.pruned := (SELECT count(*) FROM audit_events e WHERE e.seq <= NEW.seq);
    NEW.created_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER audit_checkpoint_guard
    BEFORE INSERT ON audit_checkpoints
    FOR EACH ROW
    EXECUTE FUNCTION audit_checkpoint_guard();

-- A checkpoint is never changed or deleted: the guard of checkpoints refuses every row.
CREATE TRIGGER audit_guard
    BEFORE DELETE OR UPDATE ON audit_checkpoints
    FOR EACH ROW
    EXECUTE FUNCTION audit_refuse();

CREATE TRIGGER audit_no_truncate
    BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_refuse();

-- One event per changed row of an audited table; TG_ARGV is (object type, the column naming
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
$$;

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON documents
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('document', 'id');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('revision', 'document_id');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON folders
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('folder', '');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON tags
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('tag', '');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON metadata_fields
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('metadata_field', '');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON metadata_field_options
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('metadata_option', '');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON document_metadata
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('metadata_value', 'document_id');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON access_entries
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('access_entry', 'document_id');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON access_groups
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('group', '');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON access_group_members
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('group_member', '');

-- A change of a tenant's settings is recorded like any other: switching off the recording of
-- reads, or another text search configuration, is itself in the trail.
CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON audit_settings
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('audit_setting', '');

CREATE TRIGGER audit_row
    AFTER INSERT OR DELETE OR UPDATE ON search_settings
    FOR EACH ROW
    EXECUTE FUNCTION audit_row('search_setting', '');

-- A document's tags and a multi-select value's choices are recorded as sets: one link event
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
$$;

CREATE TRIGGER audit_links_insert
    AFTER INSERT ON document_tags
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('document', 'document_id', 'tag_id', 'tag_ids');

CREATE TRIGGER audit_links_delete
    AFTER DELETE ON document_tags
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('document', 'document_id', 'tag_id', 'tag_ids');

CREATE TRIGGER audit_links_insert
    AFTER INSERT ON document_metadata_choices
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('metadata_value', 'field_id', 'option_id', 'option_ids');

CREATE TRIGGER audit_links_delete
    AFTER DELETE ON document_metadata_choices
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT
    EXECUTE FUNCTION audit_links('metadata_value', 'field_id', 'option_id', 'option_ids');

