-- The audit log is append-only: audit rows about proposals stay. The old
-- entity check is put back NOT VALID, and validated when there are none.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE engine_limits
    DROP COLUMN min_poll_seconds,
    DROP COLUMN max_baseline_seconds,
    DROP COLUMN proposal_lifetime_seconds;

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane')) NOT VALID;
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_outbox WHERE entity = 'proposal') THEN
        ALTER TABLE audit_outbox VALIDATE CONSTRAINT audit_outbox_entity_check;
    END IF;
END
$do$;

DROP TABLE config_proposals;
$ddl$);

DROP TYPE qtg.proposal_state;
DROP TYPE qtg.proposal_kind;
