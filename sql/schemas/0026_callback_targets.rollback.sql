-- The audit log is append-only: audit rows about callbacks stay. The old entity
-- check is put back NOT VALID, and validated when there are none.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                      'limit', 'breaker')) NOT VALID;
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_outbox WHERE entity IN ('callback', 'callback_target')) THEN
        ALTER TABLE audit_outbox VALIDATE CONSTRAINT audit_outbox_entity_check;
    END IF;
END
$do$;
DROP INDEX callback_outbox_dead_idx;
UPDATE callback_outbox SET delivery_state = 'DEAD' WHERE delivery_state = 'REFUSED';
ALTER TABLE callback_outbox DROP CONSTRAINT callback_outbox_delivery_state_check;
ALTER TABLE callback_outbox
    ADD CONSTRAINT callback_outbox_delivery_state_check
        CHECK (delivery_state IN ('PENDING', 'SENT', 'DEAD', 'NO_TARGET')),
    DROP COLUMN claim_hash,
    DROP COLUMN claimed_by,
    DROP COLUMN target_name,
    DROP COLUMN last_attempt_at,
    DROP COLUMN last_status,
    DROP COLUMN dead_at;
DROP TABLE callback_settings;
DROP TABLE callback_targets;
$ddl$);
