"""The audit trail: who changed what, and when, written by the database in the changing transaction.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06

Tenant only (docs/audit.md tells the whole story):

* ``audit_events``: one row per change of a document, revision, folder, tag, metadata field,
  option or value, and per change of a document's tag set or of a multi-select value's choices
  (as sets, before and after). Written by triggers in the transaction of the change, raw SQL
  included, so a rolled-back change leaves no event. Trigger ``audit_stamp`` (BEFORE INSERT)
  fills in who and when, whatever the inserting statement says: the actor from the
  transaction-local setting ``dms.actor`` that the unit of work sets (a user's id, or
  ``system:<name>``), the database role, the transaction, the time, and the caller's context
  (``dms.context``); an event is always inserted unsealed.
* Append-only: trigger ``audit_guard`` refuses to change an event (except sealing it, once) and
  to delete one, except events at or below a checkpoint (pruning); TRUNCATE is refused.
* Sealing (after commit, by :func:`dms.audit.seal_audit_trail`) gives each event its
  place in the tenant's hash chain (``seq``, ``hash``); ``audit_chain`` holds the chain's head,
  whose row the sealer locks, so only sealers wait on each other, never writers.
* ``audit_checkpoints``: where pruning cut the chain (the last pruned event's position and
  hash), append-only.
* ``audit_settings``: at most one row; ``record_reads`` makes reading a revision's content
  through the library an event.

The downgrade drops all of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from dms.migrations import MigrationScope
from dms.schema.ddl import create_functions, execute_ddl

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

#: Every event gets its actor, role, transaction, time and context here, and starts unsealed.
STAMP = """
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
"""

#: Events are never changed (sealing sets seq, hash and sealed_at once, nothing else) and never
#: deleted, except those at or below the newest checkpoint.
GUARD = """
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
"""

#: Checkpoints, like events, are never changed or deleted; nothing of the trail is truncated.
REFUSE = """
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = '23M05', CONSTRAINT = 'audit_events_append_only';
END
"""

#: One event per changed row: TG_ARGV is (object type, the column naming the document or '').
#: An update records only the columns it changed (``updated_at`` aside); an update that changed
#: nothing else records nothing. Moving a document or folder to the trash and back are
#: ``trash`` and ``restore``.
ROW = """
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
         WHERE o.key <> 'updated_at' AND o.value IS DISTINCT FROM new_row -> o.key;
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
        coalesce(row_now ->> 'id', row_now ->> 'field_id')::uuid,
        nullif(row_now ->> TG_ARGV[1], '')::uuid,
        before_values,
        after_values
    );
    RETURN NULL;
END
"""

#: A set of links (a document's tags; a multi-select value's choices) changed by one statement:
#: one event per set, with the whole set before and after. TG_ARGV is (object type, the column
#: of the set's owner that is the event's object, the member column, the set's name). The
#: links table is read after the statement, so ``after`` is the set as it now is; ``before``
#: takes the statement's own links out again (an insert) or puts them back (a delete).
#: A statement per set, not an INSERT ... SELECT over two tables: on Citus the trigger runs on
#: the tenant's node, where single-table statements are routed as they are (revision 0009).
LINKS = """
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
"""

#: (table, object type, the column naming the event's document or '') of the row triggers.
AUDITED_ROWS = (
    ("documents", "document", "id"),
    ("file_revisions", "revision", "document_id"),
    ("folders", "folder", ""),
    ("tags", "tag", ""),
    ("metadata_fields", "metadata_field", ""),
    ("metadata_field_options", "metadata_option", ""),
    ("document_metadata", "metadata_value", "document_id"),
)

#: (table, object type, object column, member column, set name) of the link-set triggers.
AUDITED_LINKS = (
    ("document_tags", "document", "document_id", "tag_id", "tag_ids"),
    ("document_metadata_choices", "metadata_value", "field_id", "option_id", "option_ids"),
)

#: (trigger, table, timing and events, level, function, arguments) of every audit trigger.
TRIGGERS = (
    ("audit_stamp", "audit_events", "BEFORE INSERT", "ROW", "audit_stamp", ()),
    ("audit_guard", "audit_events", "BEFORE UPDATE OR DELETE", "ROW", "audit_guard", ()),
    ("audit_no_truncate", "audit_events", "BEFORE TRUNCATE", "STATEMENT", "audit_refuse", ()),
    ("audit_guard", "audit_checkpoints", "BEFORE UPDATE OR DELETE", "ROW", "audit_refuse", ()),
    ("audit_no_truncate", "audit_checkpoints", "BEFORE TRUNCATE", "STATEMENT", "audit_refuse", ()),
    *(
        ("audit_row", table, "AFTER INSERT OR UPDATE OR DELETE", "ROW", "audit_row", arguments)
        for table, *arguments in AUDITED_ROWS
    ),
    *(
        (f"audit_links_{event.lower()}", table, f"AFTER {event}", "STATEMENT", "audit_links", args)
        for table, *args in AUDITED_LINKS
        for event in ("INSERT", "DELETE")
    ),
)

#: The chain's hash before its first event.
GENESIS = sa.text("decode(repeat('00', 32), 'hex')")

FUNCTIONS = {
    "audit_stamp": STAMP,
    "audit_guard": GUARD,
    "audit_refuse": REFUSE,
    "audit_row": ROW,
    "audit_links": LINKS,
}


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        _create_tables(scope.schema)
        create_functions(
            op.get_bind(),
            scope.schema,
            ((name, "", "trigger", "plpgsql", body) for name, body in FUNCTIONS.items()),
        )
        for trigger in TRIGGERS:
            _create_trigger(scope.schema, trigger)


def _create_trigger(schema: str, trigger: tuple[str, str, str, str, str, Sequence[str]]) -> None:
    name, table, events, level, function, arguments = trigger
    # A statement trigger of a links table reads the statement's links as "changed".
    transition = ""
    if level == "STATEMENT" and events.startswith("AFTER"):
        side = "NEW" if events.endswith("INSERT") else "OLD"
        transition = f"REFERENCING {side} TABLE AS changed "
    execute_ddl(
        op.get_bind(),
        sql.SQL("CREATE TRIGGER {} {} ON {}.{} {}FOR EACH {} EXECUTE FUNCTION {}.{}({})").format(
            sql.Identifier(name),
            sql.SQL(events),
            sql.Identifier(schema),
            sql.Identifier(table),
            sql.SQL(transition),
            sql.SQL(level),
            sql.Identifier(schema),
            sql.Identifier(function),
            sql.SQL(", ").join(sql.Literal(argument) for argument in arguments),
        ),
    )


def _create_tables(schema: str) -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Uuid, server_default=sa.func.gen_random_uuid(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("txid", sa.BigInteger, nullable=False),
        sa.Column("actor_id", sa.Uuid),
        sa.Column("actor_system", sa.Text),
        sa.Column("db_role", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("object_type", sa.Text, nullable=False),
        sa.Column("object_id", sa.Uuid),
        sa.Column("document_id", sa.Uuid),
        sa.Column("before", JSONB),
        sa.Column("after", JSONB),
        sa.Column("context", JSONB),
        sa.Column("seq", sa.BigInteger),
        sa.Column("hash", sa.LargeBinary),
        sa.Column("sealed_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
        sa.UniqueConstraint("seq", name="uq_audit_events_seq"),
        sa.CheckConstraint("(seq IS NULL) = (hash IS NULL)", name="ck_audit_events_sealed_whole"),
        sa.CheckConstraint(
            "num_nonnulls(actor_id, actor_system) <= 1", name="ck_audit_events_one_actor"
        ),
        schema=schema,
    )
    op.create_index(
        "ix_audit_events_occurred_at_id", "audit_events", ["occurred_at", "id"], schema=schema
    )
    op.create_index(
        "ix_audit_events_document_id_occurred_at_id",
        "audit_events",
        ["document_id", "occurred_at", "id"],
        schema=schema,
        postgresql_where=sa.text("document_id IS NOT NULL"),
    )
    op.create_index(
        "ix_audit_events_unsealed",
        "audit_events",
        ["occurred_at", "id"],
        schema=schema,
        postgresql_where=sa.text("seq IS NULL"),
    )
    op.create_table(
        "audit_chain",
        sa.Column("singleton", sa.Boolean, server_default=sa.true(), nullable=False),
        sa.Column("last_seq", sa.BigInteger, server_default="0", nullable=False),
        sa.Column("last_hash", sa.LargeBinary, server_default=GENESIS, nullable=False),
        sa.Column("sealed_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("singleton", name="pk_audit_chain"),
        sa.CheckConstraint("singleton", name="ck_audit_chain_one_row"),
        sa.CheckConstraint("last_seq >= 0", name="ck_audit_chain_seq_not_negative"),
        schema=schema,
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("seq", sa.BigInteger, autoincrement=False, nullable=False),
        sa.Column("hash", sa.LargeBinary, nullable=False),
        sa.Column("pruned", sa.BigInteger, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("seq", name="pk_audit_checkpoints"),
        sa.CheckConstraint("seq >= 1", name="ck_audit_checkpoints_seq_positive"),
        schema=schema,
    )
    op.create_table(
        "audit_settings",
        sa.Column("singleton", sa.Boolean, server_default=sa.true(), nullable=False),
        sa.Column("record_reads", sa.Boolean, server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("singleton", name="pk_audit_settings"),
        sa.CheckConstraint("singleton", name="ck_audit_settings_one_row"),
        schema=schema,
    )
    # The chain's head exists from the start (the genesis: no event, 32 zero bytes), so that
    # every sealer locks the same row.
    op.execute(sa.insert(sa.table("audit_chain", schema=schema)))


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        audit_tables = {"audit_events", "audit_checkpoints"}
        for name, table, *_rest in TRIGGERS:
            if table not in audit_tables:
                execute_ddl(
                    op.get_bind(),
                    sql.SQL("DROP TRIGGER {} ON {}.{}").format(
                        sql.Identifier(name), sql.Identifier(scope.schema), sql.Identifier(table)
                    ),
                )
        for table in ("audit_settings", "audit_checkpoints", "audit_chain", "audit_events"):
            op.drop_table(table, schema=scope.schema)
        for name in FUNCTIONS:
            execute_ddl(
                op.get_bind(),
                sql.SQL("DROP FUNCTION {}.{}()").format(
                    sql.Identifier(scope.schema), sql.Identifier(name)
                ),
            )
