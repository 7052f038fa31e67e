-- Documents: a document's file revisions are numbered 1, 2, 3 ... with no gap, and a revision
-- is never rewritten: what was uploaded stays what the revision says. The guard refuses with
-- its own SQLSTATE per rule (23M01 file_revisions_gap_free, 23M02 file_revisions_append_only),
-- so callers can tell the rules apart on Citus too, where the constraint name is not passed on.

-- Insert: takes the next number (or checks the one given), the document's row locked so that
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
$$;

CREATE TRIGGER file_revisions_guard
    BEFORE INSERT OR DELETE OR UPDATE ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION file_revisions_guard();

