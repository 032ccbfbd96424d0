-- complete_submit: SUBMITTING -> SUBMITTED (first next_observe_at from the lane's
-- pacing), or SUBMITTING -> COMPLETED when p_settled says the submit itself
-- finished the work (no observation needed). Records the external reference
-- (tx hash, exchange withdrawal id) on the node and the intent.
-- Fenced by the claim token (QT030). A report that arrives after the claim's
-- lease ran out is still accepted while the token is current (no recovery has
-- claimed the node): the side effect has happened and its reference is the
-- truth. Only record_intent_prepared refuses an expired lease, because it comes
-- before the side effect. Locks: request, node, intent.
CREATE OR REPLACE FUNCTION complete_submit(
    p_node_id      bigint,
    p_claim_token  bigint,
    p_external_ref text,
    p_evidence     jsonb DEFAULT NULL,
    p_settled      boolean DEFAULT false
) RETURNS qtg.node_state
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_node   movement_request_nodes;
    v_pacing record;
    v_to     qtg.node_state := CASE WHEN p_settled THEN 'COMPLETED' ELSE 'SUBMITTED' END;
BEGIN
    v_node := lock_claimed_node(p_node_id, p_claim_token, ARRAY['SUBMITTING']::qtg.node_state[], 'complete_submit');
    SELECT * INTO STRICT v_pacing FROM observe_pacing(v_node.lane, v_now, v_now);

    UPDATE movement_request_nodes
       SET node_state         = v_to,
           external_ref       = p_external_ref,
           evidence           = coalesce(p_evidence, evidence),
           submitted_at       = v_now,
           observe_started_at = CASE WHEN p_settled THEN NULL ELSE v_now END,
           next_observe_at    = CASE WHEN p_settled THEN NULL ELSE v_pacing.next_observe_at END,
           observe_phase      = CASE WHEN p_settled THEN NULL ELSE v_pacing.phase END,
           lease_until        = NULL,
           last_error         = NULL,
           finished_at        = CASE WHEN p_settled THEN v_now END,
           updated_at         = v_now
     WHERE id = p_node_id;

    UPDATE node_intents
       SET intent_state = 'SUBMITTED', external_ref = p_external_ref, finished_at = v_now
     WHERE node_id = p_node_id AND claim_token = p_claim_token;

    PERFORM write_audit(v_node.claimed_by, 'node', p_node_id::text, v_node.request_id, 'state_changed',
                        'SUBMITTING', v_to::text,
                        jsonb_build_object('external_ref', p_external_ref, 'evidence', p_evidence));
    RETURN follow_node_transition(p_node_id, v_node.request_id, v_to, v_node.claimed_by);
END
$$;

COMMENT ON FUNCTION complete_submit IS 'access: runner';
