-- node_requeue: requeue_node as a procedure, for CALL in psql: a node UNKNOWN
-- with a prepared or sent side effect -> READY with a fresh attempt, on the
-- word of two logins (the first call REQUESTED, another login's APPLIED).
--   CALL node_requeue(812, 'the transaction was dropped; its nonce was reused');
-- Answers requeue_node's row in the INOUT parameters: the requeue's id and
-- state, and the node's state. The requester's own second call is
-- requeue_node's QT022 WARNING. The rules, the refusals and the writes are
-- requeue_node's.
CREATE OR REPLACE PROCEDURE node_requeue(
    p_node_id bigint,
    p_reason  text,
    INOUT requeue_id    bigint DEFAULT NULL,
    INOUT requeue_state text DEFAULT NULL,
    INOUT node_state    qtg.node_state DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT r.requeue_id, r.requeue_state, r.node_state FROM requeue_node(p_node_id, p_reason) r;
$$;
