SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes RESET (fillfactor);
DROP INDEX movement_request_nodes_ccip_stranded;
CREATE INDEX movement_request_nodes_ccip_stranded ON movement_request_nodes (id)
 WHERE executor_key = 'ccip' AND node_state = 'OBSERVING' AND evidence ->> 'ccip_state' = 'FAILURE';
$ddl$);
