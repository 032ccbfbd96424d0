-- depends: 0020_protocol_registry
--
-- audit_log: the append-only audit log of a network, each row chained to the
-- one before by SHA-256. The audit_outbox_promoter (promote_audit) moves the
-- rows write_audit leaves in audit_outbox here, in order, each with
--   prev_hash  the row before's row_hash (32 zero bytes for the first)
--   row_hash   sha256(prev_hash || the row's canonical bytes, audit_canonical)
-- so that changing, removing or inserting a row anywhere breaks every link
-- after it (verify_audit_chain finds the first). Nothing but the promoter
-- writes it: no role has a grant on it but the owner, and a trigger refuses
-- UPDATE, DELETE and TRUNCATE even to the owner (QT060); an owner who disables
-- the trigger to edit a row is caught by verify_audit_chain, and one who then
-- rewrites every hash after it by the head hash exported off the host
-- (`qtg audit export`), which verify_audit_chain takes as the expected head.
--
-- audit_chain_head: the chain's last sequence number and hash, one row; the
-- promoter locks it, so promotions are serial and the chain has no fork.
--
-- The refusing trigger's function lives in qtg_admin (the installer drops and
-- re-creates the network schemas' routines on every migrate; a trigger must
-- not depend on one of them).

SET LOCAL ROLE qtg_owner;

CREATE FUNCTION qtg_admin.refuse_audit_log_change() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION '%.audit_log is append-only: % refused', TG_TABLE_SCHEMA, TG_OP
        USING ERRCODE = 'QT060',
              HINT = 'The audit log is written by the audit_outbox_promoter alone and never changed.';
END
$$;
REVOKE ALL ON FUNCTION qtg_admin.refuse_audit_log_change() FROM PUBLIC;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE audit_log (
    seq         bigint PRIMARY KEY CHECK (seq > 0),
    outbox_id   bigint NOT NULL UNIQUE,
    occurred_at timestamptz NOT NULL,
    actor       text NOT NULL,
    entity      text NOT NULL,
    entity_id   text NOT NULL,
    request_id  bigint,
    action      text NOT NULL,
    from_state  text,
    to_state    text,
    detail      jsonb NOT NULL,
    promoted_at timestamptz NOT NULL,
    prev_hash   bytea NOT NULL CHECK (length(prev_hash) = 32),
    row_hash    bytea NOT NULL CHECK (length(row_hash) = 32)
);
CREATE INDEX audit_log_request_idx ON audit_log (request_id) WHERE request_id IS NOT NULL;
CREATE INDEX audit_log_occurred_idx ON audit_log (occurred_at);

CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION qtg_admin.refuse_audit_log_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_admin.refuse_audit_log_change();

CREATE TABLE audit_chain_head (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq        bigint NOT NULL CHECK (seq >= 0),
    row_hash   bytea NOT NULL CHECK (length(row_hash) = 32),
    updated_at timestamptz NOT NULL
);
INSERT INTO audit_chain_head (seq, row_hash, updated_at) VALUES (0, decode(repeat('00', 32), 'hex'), now());
$ddl$);
