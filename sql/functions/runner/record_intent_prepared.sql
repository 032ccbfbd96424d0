-- record_intent_prepared: intent CLAIMED | PREPARED -> PREPARED; node stays SUBMITTING.
-- Records what the side effect will be before it happens: the EVM nonce and the
-- signed transaction's hash, or the external request id, plus any payload the
-- executor needs for recovery. For an EVM transaction also the account
-- (p_chain_key, p_sender) whose nonce is allocated here, and the signed raw
-- transaction (p_raw_tx), recorded before it is broadcast. Called again for a replacement transaction, it
-- keeps every hash ever signed in signed_tx_hashes so recovery checks exact
-- hashes. Refused once the claim's lease ran out (QT030): a dispatcher that
-- cannot record its intent must not broadcast. Locks: request, node, intent.
-- One node of record_intent_prepared_batch, which holds the rules: a refused
-- node raises here with the batch's SQLSTATE and message, and nothing changes.
CREATE OR REPLACE FUNCTION record_intent_prepared(
    p_node_id             bigint,
    p_claim_secret        text,
    p_nonce               bigint DEFAULT NULL,
    p_signed_tx_hash      text DEFAULT NULL,
    p_external_request_id text DEFAULT NULL,
    p_payload             jsonb DEFAULT NULL,
    p_chain_key           text DEFAULT NULL,
    p_sender              text DEFAULT NULL,
    p_raw_tx              text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql
AS $$
    SELECT r.intent_id
      FROM record_intent_prepared_batch(ARRAY[p_node_id], ARRAY[p_claim_secret], ARRAY[p_nonce],
                                        ARRAY[p_signed_tx_hash], ARRAY[p_external_request_id],
                                        ARRAY[p_payload], ARRAY[p_chain_key], ARRAY[p_sender],
                                        ARRAY[p_raw_tx]) r,
           raise_node_error(r.error_code, r.error_message);
$$;
