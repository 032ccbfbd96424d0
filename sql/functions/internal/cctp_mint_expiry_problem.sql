-- cctp_mint_expiry_problem: why recovery may not report a cctp_mint node
-- NOT_SUBMITTED once its intent was prepared, or NULL when it may: its mint
-- reverted because the attested message had expired, so it can never land and
-- nothing was minted, and a new attempt (with the message re-attested) can
-- only mint that same message, whose nonce the transmitter spends once (each
-- of its mints is held to its burn's nonce by bridge_call_problem). As far as
-- SQL sees it, p_evidence must show:
--   the transaction (p_external_ref, else the evidence's tx_hash) is one the
--   latest intent recorded; mined and reverted (status 0) at block_number;
--   the nonce unused (used_nonce false); expired true;
-- and the recorded bytes of that transaction receive a message whose burn
-- body's expirationBlock is non-zero and at most block_number (a mint at or
-- past it reverts "Message expired and must be re-signed").
-- The answer is a message without a code (complete_recovery raises QT021).
-- Reads only. Internal: complete_recovery.
CREATE OR REPLACE FUNCTION cctp_mint_expiry_problem(
    p_node_id      bigint,
    p_evidence     jsonb,
    p_external_ref text
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_node       movement_request_nodes;
    v_intent     node_intents;
    v_ref        text := coalesce(p_external_ref, p_evidence ->> 'tx_hash');
    v_raw        text;
    v_message    bytea;
    v_expiration numeric;
    v_block      numeric;
BEGIN
    SELECT * INTO v_node FROM movement_request_nodes WHERE id = p_node_id;
    IF v_node.executor_key IS DISTINCT FROM 'cctp_mint' THEN
        RETURN 'a fresh payload needs requeue_node by two operators';
    END IF;
    SELECT * INTO v_intent FROM node_intents WHERE node_id = p_node_id ORDER BY claim_token DESC LIMIT 1;
    IF p_evidence IS NULL OR jsonb_typeof(p_evidence) <> 'object'
       OR p_evidence -> 'expired' IS DISTINCT FROM 'true'::jsonb
       OR p_evidence -> 'used_nonce' IS DISTINCT FROM 'false'::jsonb
       OR p_evidence ->> 'status' IS DISTINCT FROM '0'
       OR coalesce(p_evidence ->> 'block_number', '') !~ '^[0-9]{1,20}$' THEN
        RETURN 'a cctp_mint is tried again only on evidence that its mint reverted past the message''s '
               'expirationBlock with the nonce unused (expired, used_nonce false, status 0, block_number)';
    END IF;
    v_block := (p_evidence ->> 'block_number')::numeric;
    IF v_ref IS NULL OR NOT v_ref = ANY (coalesce(v_intent.signed_tx_hashes, '{}')) THEN
        RETURN format('the evidence names transaction %s, not one the intent signed', coalesce(left(v_ref, 70), 'none'));
    END IF;
    SELECT x.raw_tx INTO v_raw FROM evm_transactions x WHERE x.tx_hash = v_ref AND x.intent_id = v_intent.id;
    IF v_raw IS NULL THEN
        RETURN format('transaction %s has no recorded bytes to read the message from', v_ref);
    END IF;
    v_message := cctp_received_message((SELECT d.data FROM evm_decode_raw('cctp_mint_expiry_problem', v_raw) d));
    v_expiration := abi_uint(v_message, 148 + 196);
    IF v_expiration IS NULL OR v_expiration = 0 OR v_expiration > v_block THEN
        RETURN format('transaction %s received a message expiring at block %s, not at or before block %s', v_ref,
                      coalesce(v_expiration::text, 'none'), v_block);
    END IF;
    RETURN NULL;
END
$$;
