-- complete_submit: SUBMITTING -> SUBMITTED (first next_observe_at from the lane's
-- pacing), or SUBMITTING -> COMPLETED when p_settled says the submit itself
-- finished the work (no observation needed). Records the external reference
-- (tx hash, exchange withdrawal id) on the node and the intent; a report
-- without one (NULL or blank) is refused (QT002).
-- Fenced by the claim's secret (QT030). A report that arrives after the claim's
-- lease ran out is still accepted while the secret is current (no recovery has
-- claimed the node): the side effect has happened and its reference is the
-- truth. Only record_intent_prepared refuses an expired lease, because it comes
-- before the side effect. Locks: request, node, intent.
-- One node of complete_submit_batch, which holds the rules: a refused node
-- raises here with the batch's SQLSTATE and message, and nothing changes.
CREATE OR REPLACE FUNCTION complete_submit(
    p_node_id      bigint,
    p_claim_secret text,
    p_external_ref text,
    p_evidence     jsonb DEFAULT NULL,
    p_settled      boolean DEFAULT false
) RETURNS qtg.node_state
LANGUAGE sql
AS $$
    SELECT r.node_state
      FROM complete_submit_batch(ARRAY[p_node_id], ARRAY[p_claim_secret], ARRAY[p_external_ref],
                                 ARRAY[p_evidence], ARRAY[coalesce(p_settled, false)]) r,
           raise_node_error(r.error_code, r.error_message);
$$;
