-- The audit log is append-only: audit rows about chains stay. The old entity
-- check is put back NOT VALID, and validated when there are none.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal')) NOT VALID;
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_outbox WHERE entity = 'chain') THEN
        ALTER TABLE audit_outbox VALIDATE CONSTRAINT audit_outbox_entity_check;
    END IF;
END
$do$;

DROP TABLE allowed_destinations;
DROP TABLE treasury_accounts;
DROP TABLE chain_tokens;
DROP TABLE chains;
$ddl$);
