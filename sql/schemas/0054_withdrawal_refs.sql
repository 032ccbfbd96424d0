-- depends: 0053_ccip_lanes
--
-- One withdrawal settles one node. recovery_evidence_problem refuses a
-- bybit_withdraw node's COMPLETED that names a withdrawal id another node
-- already holds as its external_ref (a look-alike record of the same amount
-- to the same address, or a forged verdict): this index makes that look-up a
-- key read over the withdraw nodes that hold an id, whatever the history.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE INDEX movement_request_nodes_withdrawal_ref_idx ON movement_request_nodes (external_ref)
    WHERE executor_key = 'bybit_withdraw' AND external_ref IS NOT NULL;
$ddl$);
