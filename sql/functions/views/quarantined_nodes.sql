-- quarantined_nodes: the nodes set aside and not finished, oldest first: what
-- broke (reason), where the node stands, and since when. No claim hands them
-- out until an operator calls release_quarantine(node_id, reason); a
-- cancelled movement skips the ones still READY.
CREATE OR REPLACE VIEW quarantined_nodes AS
SELECT node.id AS node_id,
       node.request_id AS movement_id,
       request.external_id,
       node.node_key,
       node.executor_key,
       node.lane,
       node.node_state,
       node.quarantine_reason AS reason,
       node.quarantined_at,
       clock() - node.quarantined_at AS quarantined_for,
       node.lost_claims,
       node.submit_attempts,
       node.last_error,
       node.claimed_by AS last_claimed_by
  FROM movement_request_nodes node
  JOIN movement_requests request ON request.id = node.request_id
 WHERE node.quarantined_at IS NOT NULL
   AND node.finished_at IS NULL
 ORDER BY node.quarantined_at, node.id;
