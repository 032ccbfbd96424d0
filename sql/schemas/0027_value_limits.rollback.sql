SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DELETE FROM audit_outbox WHERE entity IN ('limit', 'breaker');
ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                      'callback', 'callback_target'));
DROP INDEX movement_request_nodes_failed_idx;
DROP TABLE breakers;
DROP TABLE value_usage;
DROP TABLE value_limits;
$ddl$);
