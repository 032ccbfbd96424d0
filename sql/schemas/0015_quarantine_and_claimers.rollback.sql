SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX movement_request_nodes_quarantined_idx;
DROP INDEX movement_request_nodes_claimer_idx;
DROP INDEX movement_request_nodes_ready_idx;
CREATE INDEX movement_request_nodes_ready_idx ON movement_request_nodes (priority DESC, id)
    WHERE node_state = 'READY';
DROP INDEX movement_request_nodes_observable_idx;
CREATE INDEX movement_request_nodes_observable_idx ON movement_request_nodes (next_observe_at)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING');
DROP INDEX movement_request_nodes_recoverable_idx;
CREATE INDEX movement_request_nodes_recoverable_idx ON movement_request_nodes (lease_until)
    WHERE node_state IN ('UNKNOWN', 'SUBMITTING');
ALTER TABLE engine_limits DROP COLUMN quarantine_after_lost_claims;
ALTER TABLE movement_request_nodes
    DROP COLUMN quarantined_at,
    DROP COLUMN quarantine_reason,
    DROP COLUMN lost_claims,
    DROP COLUMN claimer_worker,
    DROP COLUMN claimer_instance;
$ddl$);
