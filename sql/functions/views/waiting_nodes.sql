-- waiting_nodes: READY nodes whose not_before is still ahead, which no claim
-- takes before it: a retry's backoff (fail_submit), a claim given back
-- (release_nodes: no runner here has the executor, or its endpoint was
-- throttled, 'throttled: ...'), and how long is left; a requeued node that
-- waits for the chain to consume its abandoned intent's nonce
-- (awaits_nonce_of, no time: until the nonce reaper closes it); last_error
-- says why the node waits. Soonest first. A quarantined node is in quarantined_nodes
-- instead: it waits for an operator, not for the clock. Read through the
-- READY nodes' partial index, not every node.
CREATE OR REPLACE VIEW waiting_nodes AS
SELECT node.node_id, node.movement_id, node.external_id, node.node_key, node.executor_key, node.lane,
       node.not_before,
       extract(epoch FROM node.not_before - clock()) AS seconds_left,
       node.submit_attempts,
       node.last_error
  FROM all_nodes node
 WHERE node.node_state = 'READY'
   AND node.quarantined_at IS NULL
   AND (node.not_before > clock() OR node.awaits_nonce_of IS NOT NULL)
 ORDER BY node.not_before NULLS LAST, node.node_id;
