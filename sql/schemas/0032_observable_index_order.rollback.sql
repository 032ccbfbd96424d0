SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX movement_request_nodes_observable_idx;
CREATE INDEX movement_request_nodes_observable_idx ON movement_request_nodes (next_observe_at)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING') AND quarantined_at IS NULL;
$ddl$);
