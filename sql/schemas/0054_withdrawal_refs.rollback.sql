SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX movement_request_nodes_withdrawal_ref_idx;
$ddl$);
