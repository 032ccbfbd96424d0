-- cctp_burn_message: the message a cctp_mint node mints: its one cctp_burn
-- parent (burn_node_id) and the nonce that parent's evidence shows, lower
-- case (nonce, as given: its form is the caller's to check); both NULL when
-- the node has no cctp_burn parent or more than one. Reads only. Internal:
-- bridge_call_problem (the signed bytes), intent_payload_problem (the
-- payload), record_intent_prepared_batch and settle_mint_messages (one message,
-- one mint: cctp_message_mints).
CREATE OR REPLACE FUNCTION cctp_burn_message(
    p_node_id        bigint,
    OUT burn_node_id bigint,
    OUT nonce        text
)
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN count(*) = 1 THEN min(parent.id) END,
           CASE WHEN count(*) = 1 THEN lower(min(parent.evidence ->> 'nonce')) END
      FROM movement_plan_edges edge
      JOIN movement_request_nodes parent ON parent.id = edge.parent_node_id
     WHERE edge.child_node_id = p_node_id AND parent.executor_key = 'cctp_burn';
$$;
