-- in_flight_nodes: every node with a side effect possibly out, or being
-- dispatched: its phase, next observation, and how long it has been in flight;
-- held_seconds: how long the runner's request budget held its polls back in
-- its observation window (not counted as time observing), held_reason: why
-- its last poll was held back (NULL once a poll is made).
CREATE OR REPLACE VIEW in_flight_nodes AS
SELECT node.node_id, node.movement_id, node.external_id, node.node_key, node.executor_key, node.lane,
       node.node_state,
       node.observe_phase,
       node.observe_count,
       node.next_observe_at,
       node.submitted_at,
       node.lease_until,
       node.claimed_by,
       node.external_ref,
       clock() - coalesce(node.submitted_at, node.claimed_at) AS in_flight_for,
       node.observe_held_seconds AS held_seconds,
       node.observe_held_reason AS held_reason
  FROM all_nodes node
 WHERE node.node_state IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING', 'UNKNOWN')
   -- the same nodes, as the partial indexes hold them (observable, recoverable,
   -- quarantined): the view reads the nodes in flight, not every node
   AND ((node.node_state IN ('SUBMITTED', 'OBSERVING') AND node.quarantined_at IS NULL)
     OR (node.node_state IN ('UNKNOWN', 'SUBMITTING') AND node.quarantined_at IS NULL)
     OR (node.quarantined_at IS NOT NULL AND node.finished_at IS NULL));
