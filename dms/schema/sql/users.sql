-- Users: known_users is the tenant's own record of the IAM users its rows name. The user columns
-- of tenant tables (created_by, uploaded_by, imported_by) refer to known_users, so their foreign
-- keys stay inside the tenant schema, and only known_users refers to the IAM's users table: one
-- key (two triggers on users) per tenant instead of one per column. Writing a row that names a
-- user enlists that user first. A user who does not exist is still refused (by known_users' key
-- to users), and a user whom a row still names cannot be deleted (the cascade from users to
-- known_users is restricted by the tenant's keys).

-- Enlists the user a row names in known_users before the row is written, so writers name users
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
$$;

CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON folders
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by');

CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON documents
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by');

CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF uploaded_by ON file_revisions
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('uploaded_by');

CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON tags
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by');

CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF created_by ON metadata_fields
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('created_by');

CREATE TRIGGER known_users_enlist
    BEFORE INSERT OR UPDATE OF imported_by ON import_provenance
    FOR EACH ROW
    EXECUTE FUNCTION known_users_enlist('imported_by');

