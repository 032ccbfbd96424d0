-- quarantined_nodes: the nodes set aside and not finished, oldest first: what
-- broke (reason), where the node stands, and since when. No claim hands them
-- out until an operator calls release_quarantine(node_id, reason); a
-- cancelled movement skips the ones still READY.
CREATE OR REPLACE VIEW quarantined_nodes AS
SELECT node.node_id, node.movement_id, node.external_id, node.node_key, node.executor_key, node.lane,
       node.node_state,
       node.quarantine_reason AS reason,
       node.quarantined_at,
       clock() - node.quarantined_at AS quarantined_for,
       node.lost_claims,
       node.submit_attempts,
       node.last_error,
       node.claimed_by AS last_claimed_by
  FROM all_nodes node
 WHERE node.quarantined_at IS NOT NULL
   AND node.finished_at IS NULL
 ORDER BY node.quarantined_at, node.node_id;
