-- complete_observe: SUBMITTED | OBSERVING -> OBSERVING | COMPLETED | FAILED | UNKNOWN,
-- for one node: one node of complete_observe_batch, which holds the rules
-- (the outcomes PENDING, COMPLETED, FAILED, UNKNOWN and ERROR, the lane's
-- pacing and the executor's retry_after_seconds hint, the latency sample, the
-- DAG step and the settle). A refused node raises here with the batch's
-- SQLSTATE and message (QT002, QT005, QT011, QT021, QT030, QT050), and nothing
-- changes. Fenced by the claim's secret. Locks: request, node (already held by
-- the observer's claim). Returns the node's new state, phase and next
-- observation.
CREATE OR REPLACE FUNCTION complete_observe(
    p_node_id             bigint,
    p_claim_secret        text,
    p_outcome             text,
    p_evidence            jsonb DEFAULT NULL,
    p_retry_after_seconds numeric DEFAULT NULL,
    p_worker              text DEFAULT NULL
) RETURNS TABLE (node_state qtg.node_state, observe_phase qtg.observe_phase, next_observe_at timestamptz)
LANGUAGE sql
AS $$
    SELECT r.node_state, r.observe_phase, r.next_observe_at
      FROM complete_observe_batch(ARRAY[p_node_id], ARRAY[p_claim_secret], ARRAY[p_outcome],
                                  ARRAY[p_evidence], ARRAY[p_retry_after_seconds], p_worker) r,
           raise_node_error(r.error_code, r.error_message);
$$;
