-- depends: 0070_deposit_attribution
--
-- One withdrawal settles one node. recovery_evidence_problem refused a
-- bybit_withdraw node's COMPLETED that named a withdrawal id another node
-- holds; but complete_recovery took such an id as is for IN_FLIGHT and
-- STILL_UNKNOWN, and complete_submit on any report. The observer then read
-- that withdrawal as the node's: a runner login could point a node at
-- another node's withdrawal of the same amount to the same address, and
-- have it COMPLETED with nothing paid for it. The index is now unique:
--   movement_request_nodes_withdrawal_ref_key  unique: a bybit_withdraw
--                                              node's external_ref
--                                              (replaces ..._withdrawal_ref_idx)
-- A database where two withdraw nodes already hold one id is not migrated:
-- the migration says which, for an operator to settle first.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DO $check$
DECLARE
    v_twice text;
BEGIN
    SELECT string_agg(format('%s (nodes %s)', external_ref, nodes), '; ')
      INTO v_twice
      FROM (SELECT external_ref, string_agg(id::text, ', ' ORDER BY id) AS nodes
              FROM movement_request_nodes
             WHERE executor_key = 'bybit_withdraw' AND external_ref IS NOT NULL
             GROUP BY external_ref
            HAVING count(*) > 1) twice;
    IF v_twice IS NOT NULL THEN
        RAISE EXCEPTION 'network %: withdraw nodes hold one withdrawal twice: %', current_schema(), v_twice
            USING ERRCODE = 'QT032',
                  HINT = 'One withdrawal settles one node: requeue_node or cancel the node that does not own it, '
                         'then migrate again.';
    END IF;
END
$check$;
DROP INDEX movement_request_nodes_withdrawal_ref_idx;
CREATE UNIQUE INDEX movement_request_nodes_withdrawal_ref_key ON movement_request_nodes (external_ref)
    WHERE executor_key = 'bybit_withdraw' AND external_ref IS NOT NULL;
$ddl$);
