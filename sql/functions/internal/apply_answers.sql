-- apply_answers: the answer of a batch call that reports on each of its
-- nodes (the apply_each loop of complete_submit_batch, complete_observe_batch,
-- record_intent_prepared_batch and release_nodes, and quarantine_nodes), read
-- once its rounds are done: one row per element of p_node_ids, in input order. Where the element
-- was not refused (p_codes[i] NULL) the node as the call left it: its state,
-- observe phase and next observation, and the intent of its current claim;
-- else the refusal's code and message (p_codes, p_messages: element i for
-- node i, the guard's, the checks' and a failed round's QT050). Each caller
-- answers the columns its own rows carry. Internal. Reads the nodes and their
-- intents by key; takes no lock (the caller holds them).
-- Plans: one for the session (force_generic_plan), whatever the caller's
-- mode, as lock_claimed_nodes: the read goes by primary key from the ids
-- given (a LANGUAGE sql function here would be planned again on each call).
CREATE OR REPLACE FUNCTION apply_answers(p_node_ids bigint[], p_codes text[], p_messages text[])
RETURNS TABLE (node_id bigint, node_state qtg.node_state, observe_phase qtg.observe_phase,
               next_observe_at timestamptz, intent_id bigint, error_code text, error_message text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    SELECT u.node_id, n.node_state, n.observe_phase, n.next_observe_at, i.id, u.code, u.message
      FROM unnest(p_node_ids, p_codes, p_messages) WITH ORDINALITY AS u(node_id, code, message, ord)
      LEFT JOIN movement_request_nodes n ON u.code IS NULL AND n.id = u.node_id
      LEFT JOIN node_intents i ON i.node_id = n.id AND i.claim_token = n.claim_token
     ORDER BY u.ord;
END
$$;
