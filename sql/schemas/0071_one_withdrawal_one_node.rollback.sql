SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX movement_request_nodes_withdrawal_ref_key;
CREATE INDEX movement_request_nodes_withdrawal_ref_idx ON movement_request_nodes (external_ref)
    WHERE executor_key = 'bybit_withdraw' AND external_ref IS NOT NULL;
$ddl$);
