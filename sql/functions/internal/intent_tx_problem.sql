-- intent_tx_problem: why the signed bytes a runner records for a node's intent
-- may not be broadcast, or NULL when they may. Read in SQL from the bytes
-- themselves (evm_decode_raw), not from what the runner says they are:
--   QT002 not a well-formed type-2 transaction; signed for another chain id
--         than the chain's; carrying another nonce than the one recorded with
--         it; fees above the chain's caps
--   QT032 bytes recorded under another chain or account than the route's
--         (chain_key and sender, the chain leg intent_route reads): the
--         nonce reaper signs a stale intent's call again with the recorded
--         account's key, so an account no approver named would pay;
--         a call its route does not say: an evm_transfer node may only
--         transfer() exactly what evm_transfer_route says (token, recipient,
--         amount; no ether); a bridge node's call is exactly the one its
--         route says (ccip: ccip_send_tx_problem, its fee against the quote
--         in p_payload, the payload recorded with the bytes; cctp_burn,
--         cctp_mint, stargate: bridge_call_problem). A node of any other
--         executor (sim, the exchange steps, one the admin registered) signs
--         no transaction: the engine holds no other call to an approved
--         route, and the nonce reaper signs a stale intent's call again with
--         the account's key. Allowances to a bridge are the operator's setup
--         step (cctp_allowance), never a node's.
-- The answer is 'QTnnn message' (the batch reports it in the node's row).
-- Reads only. Internal: record_intent_prepared_batch asks it for every raw
-- transaction it records.
CREATE OR REPLACE FUNCTION intent_tx_problem(
    p_node_id   bigint,
    p_chain_key text,
    p_sender    text,
    p_nonce     bigint,
    p_raw       text,
    p_payload   jsonb DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_what     text := format('record_intent_prepared: node %s', p_node_id);
    v_tx       record;
    v_chain    chains;
    v_executor text;
    v_arg1     text;
    v_arg2     numeric;
    v_route    record;
    v_leg      jsonb;
    i          integer;
BEGIN
    BEGIN
        SELECT * INTO v_tx FROM evm_decode_raw(v_what || ': the raw transaction', p_raw);
        SELECT * INTO v_chain FROM chains WHERE chain_key = p_chain_key;
        PERFORM check_fee_caps('record_intent_prepared', format('node %s''s transaction', p_node_id),
                               v_tx.max_fee_per_gas, v_tx.max_priority_fee_per_gas, v_chain);
    EXCEPTION WHEN SQLSTATE 'QT002' THEN
        RETURN 'QT002 ' || SQLERRM;
    END;
    IF v_tx.chain_id <> v_chain.chain_id THEN
        RETURN format('QT002 %s: the transaction is signed for chain id %s, chain %s is %s',
                      v_what, v_tx.chain_id, p_chain_key, v_chain.chain_id);
    END IF;
    IF v_tx.nonce <> p_nonce THEN
        RETURN format('QT002 %s: the transaction carries nonce %s, recorded as %s', v_what, v_tx.nonce, p_nonce);
    END IF;

    SELECT n.executor_key INTO v_executor FROM movement_request_nodes n WHERE n.id = p_node_id;
    IF NOT coalesce(signs_evm(v_executor), false) THEN
        RETURN format('QT032 %s: a %s node signs no transaction (only evm_transfer, cctp_burn, cctp_mint, ccip '
                      'and stargate nodes do, each its route''s one call)', v_what, coalesce(v_executor, 'missing'));
    END IF;
    BEGIN
        SELECT r.route INTO v_leg FROM intent_route(p_node_id, NULL) r;
    EXCEPTION WHEN SQLSTATE 'QT002' OR SQLSTATE 'QT011' OR SQLSTATE 'QT014' OR SQLSTATE 'QT032' THEN
        RETURN SQLSTATE || ' ' || SQLERRM;
    END;
    IF (v_leg ->> 'chain_key', v_leg ->> 'sender') IS DISTINCT FROM (p_chain_key, p_sender) THEN
        RETURN format('QT032 %s: a %s node signs on %s from %s, as its route says; not on %s from %s', v_what,
                      v_executor, v_leg ->> 'chain_key', v_leg ->> 'sender', p_chain_key, p_sender);
    END IF;
    IF v_executor = 'evm_transfer' THEN
        BEGIN
            SELECT * INTO v_route FROM evm_transfer_route(p_node_id);
        EXCEPTION WHEN SQLSTATE 'QT002' OR SQLSTATE 'QT014' OR SQLSTATE 'QT032' THEN
            RETURN SQLSTATE || ' ' || SQLERRM;
        END;
        IF length(v_tx.data) = 68 AND encode(substring(v_tx.data FROM 1 FOR 4), 'hex') = 'a9059cbb'
           AND substring(v_tx.data FROM 5 FOR 12) = '\x000000000000000000000000'::bytea THEN
            v_arg1 := '0x' || encode(substring(v_tx.data FROM 17 FOR 20), 'hex');
            v_arg2 := 0;
            FOR i IN 36 .. 67 LOOP
                v_arg2 := v_arg2 * 256 + get_byte(v_tx.data, i);
            END LOOP;
        END IF;
        IF v_arg1 IS NOT NULL AND v_tx.value = 0 AND v_route.token_address = v_tx.to_address
           AND v_route.recipient = v_arg1 AND v_route.amount_units = v_arg2 THEN
            RETURN NULL;
        END IF;
        RETURN format('QT032 %s: an evm_transfer node signs transfer(%s, %s) on %s''s %s and nothing else',
                      v_what, v_route.recipient, v_route.amount_units, v_route.chain_key, v_route.token);
    END IF;
    IF v_executor = 'ccip' THEN
        RETURN ccip_send_tx_problem(p_node_id, p_chain_key, v_tx.to_address, v_tx.value, v_tx.data, p_payload);
    END IF;
    -- cctp_burn, cctp_mint, stargate
    RETURN bridge_call_problem(p_node_id, v_executor, p_chain_key, v_tx.to_address, v_tx.value, v_tx.data);
END
$$;
