-- record_intent_prepared: intent CLAIMED | PREPARED -> PREPARED; node stays SUBMITTING.
-- Records what the side effect will be before it happens: the EVM nonce and the
-- signed transaction's hash, or the external request id, plus any payload the
-- executor needs for recovery. Called again for a replacement transaction, it
-- keeps every hash ever signed in signed_tx_hashes so recovery checks exact
-- hashes. Refused once the claim's lease ran out (QT030): a dispatcher that
-- cannot record its intent must not broadcast. Locks: request, node, intent.
CREATE OR REPLACE FUNCTION record_intent_prepared(
    p_node_id             bigint,
    p_claim_token         bigint,
    p_nonce               bigint DEFAULT NULL,
    p_signed_tx_hash      text DEFAULT NULL,
    p_external_request_id text DEFAULT NULL,
    p_payload             jsonb DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_node   movement_request_nodes;
    v_intent node_intents;
BEGIN
    v_node := lock_claimed_node(p_node_id, p_claim_token, ARRAY['SUBMITTING']::qtg.node_state[], 'record_intent_prepared');
    IF v_node.lease_until <= v_now THEN
        RAISE EXCEPTION 'record_intent_prepared: the claim on node % expired at %', p_node_id, v_node.lease_until
            USING ERRCODE = 'QT030', HINT = 'Do not broadcast: recovery may already own this node.';
    END IF;
    IF p_signed_tx_hash IS NULL AND p_external_request_id IS NULL AND p_payload IS NULL THEN
        RAISE EXCEPTION 'record_intent_prepared: give a signed tx hash, an external request id or a payload'
            USING ERRCODE = 'QT002';
    END IF;

    UPDATE node_intents
       SET intent_state        = 'PREPARED',
           nonce               = coalesce(p_nonce, nonce),
           signed_tx_hash      = coalesce(p_signed_tx_hash, signed_tx_hash),
           signed_tx_hashes    = CASE WHEN p_signed_tx_hash IS NULL OR p_signed_tx_hash = ANY (signed_tx_hashes)
                                      THEN signed_tx_hashes ELSE signed_tx_hashes || p_signed_tx_hash END,
           external_request_id = coalesce(p_external_request_id, external_request_id),
           prepared_payload    = coalesce(p_payload, prepared_payload),
           prepared_at         = v_now
     WHERE node_id = p_node_id
       AND claim_token = p_claim_token
       AND intent_state IN ('CLAIMED', 'PREPARED')
    RETURNING * INTO v_intent;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'record_intent_prepared: node % has no open intent for token %', p_node_id, p_claim_token
            USING ERRCODE = 'QT021';
    END IF;

    PERFORM write_audit(v_node.claimed_by, 'node', p_node_id::text, v_node.request_id, 'intent_prepared',
                        'SUBMITTING', 'SUBMITTING',
                        jsonb_build_object('intent_id', v_intent.id, 'nonce', p_nonce,
                                           'signed_tx_hash', p_signed_tx_hash,
                                           'external_request_id', p_external_request_id));
    RETURN v_intent.id;
END
$$;

COMMENT ON FUNCTION record_intent_prepared IS 'access: runner';
