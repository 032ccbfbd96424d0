-- The audit log is append-only: audit rows about balances stay. The old entity
-- check is put back NOT VALID, and validated when there are none.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                      'callback', 'callback_target', 'limit', 'breaker')) NOT VALID;
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_outbox WHERE entity = 'balance') THEN
        ALTER TABLE audit_outbox VALIDATE CONSTRAINT audit_outbox_entity_check;
    END IF;
END
$do$;

DROP INDEX movement_request_nodes_balance_idx;
DROP TABLE balance_drift_alerts;
DROP TABLE balance_baselines;
DROP TABLE balance_snapshots;
DROP TABLE balance_reads;
DROP TABLE balance_settings;
$ddl$);
