-- requeue_requests: requeues waiting for a second operator, with what the
-- requester saw; from_state: the node's state when asked (UNKNOWN: a fresh
-- side effect; FAILED: a retry). still_applies is false once the node moved
-- on, or another of its movement's nodes FAILED that the request does not
-- cover (a confirm would then record a new request instead): requeue_node
-- applies the requests that still apply, and only those.
CREATE OR REPLACE VIEW requeue_requests AS
SELECT r.id AS requeue_id,
       r.node_id,
       r.request_id AS movement_id,
       node.node_key,
       node.executor_key,
       request.amount,
       request.asset,
       r.reason,
       r.requested_by,
       r.requested_at,
       r.evidence,
       node.node_state,
       r.from_state,
       node.node_state::text = r.from_state
           AND r.intent_id = (SELECT i.id FROM node_intents i WHERE i.node_id = r.node_id
                               ORDER BY i.claim_token DESC LIMIT 1)
           -- a retry asks for every FAILED node of the movement, by one requester
           AND (r.from_state <> 'FAILED'
                OR NOT EXISTS (SELECT 1 FROM movement_request_nodes f
                                WHERE f.request_id = r.request_id AND f.node_state = 'FAILED'
                                  AND NOT EXISTS (SELECT 1 FROM node_requeues q
                                                   WHERE q.node_id = f.id AND q.state = 'REQUESTED'
                                                     AND q.requested_by = r.requested_by)))
           AS still_applies
  FROM node_requeues r
  JOIN movement_request_nodes node ON node.id = r.node_id
  JOIN movement_requests request ON request.id = r.request_id
 WHERE r.state = 'REQUESTED';
