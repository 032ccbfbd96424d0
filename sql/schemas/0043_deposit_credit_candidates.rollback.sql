SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX movement_request_nodes_unreferenced_transfers_idx;
DROP INDEX movement_request_nodes_void_deposit_steps_idx;
DROP INDEX movement_request_nodes_deposit_steps_idx;
DROP INDEX capital_transfer_followups_state_idx;
$ddl$);
