-- retryable_nodes: the FAILED nodes of which nothing can have happened, which
-- two operators may retry (requeue_node: node_retry_refusals has no row for
-- them), newest failure first; retry_asked_by: who asked for the retry
-- already (another operator applies it), NULL when nobody has. Read through
-- the FAILED nodes' partial index, not every node.
CREATE OR REPLACE VIEW retryable_nodes AS
SELECT node.node_id, node.movement_id, node.external_id, node.node_key, node.executor_key, node.lane,
       node.last_error,
       node.finished_at AS failed_at,
       (SELECT r.requested_by FROM requeue_requests r
         WHERE r.node_id = node.node_id AND r.still_applies
         ORDER BY r.requeue_id DESC LIMIT 1) AS retry_asked_by
  FROM all_nodes node
 WHERE node.node_state = 'FAILED'
   AND NOT EXISTS (SELECT 1 FROM node_retry_refusals x WHERE x.node_id = node.node_id)
 ORDER BY node.finished_at DESC, node.node_id DESC;
