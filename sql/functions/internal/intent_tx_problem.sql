-- intent_tx_problem: why the signed bytes a runner records for a node's intent
-- may not be broadcast, or NULL when they may. Read in SQL from the bytes
-- themselves (evm_decode_raw), not from what the runner says they are:
--   QT002 not a well-formed type-2 transaction; signed for another chain id
--         than the chain's; carrying another nonce than the one recorded with
--         it; fees above the chain's caps
--   QT032 a call the registry does not allow: the transaction must call the
--         chain's registered token or a bridge contract registered on the
--         chain (chain_protocols), nothing else and never a contract creation.
--         On the token, an evm_transfer node may only transfer() exactly what
--         evm_transfer_route says (token, recipient, amount; no ether), and any
--         other node may only approve() a bridge contract of the chain for at
--         most the movement's amount; an evm_transfer node calls nothing else.
--         A bridge node's call is exactly the one its route says (ccip:
--         ccip_send_tx_problem, its fee against the quote in p_payload, the
--         payload recorded with the bytes; cctp_burn, cctp_mint, stargate:
--         bridge_call_problem); another executor's, any bridge contract of
--         the chain.
-- The answer is 'QTnnn message' (the batch reports it in the node's row).
-- Reads only. Internal: record_intent_prepared_batch asks it for every raw
-- transaction it records.
CREATE OR REPLACE FUNCTION intent_tx_problem(
    p_node_id   bigint,
    p_chain_key text,
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
    v_amount   numeric;
    v_token    chain_tokens;
    v_selector text;
    v_arg1     text;
    v_arg2     numeric;
    v_route    record;
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

    SELECT n.executor_key, r.amount INTO v_executor, v_amount
      FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
     WHERE n.id = p_node_id;
    SELECT * INTO v_token FROM chain_tokens WHERE chain_key = p_chain_key AND address = v_tx.to_address;
    v_selector := encode(substring(v_tx.data FROM 1 FOR 4), 'hex');
    IF v_token.address IS NOT NULL AND length(v_tx.data) = 68 AND v_selector IN ('a9059cbb', '095ea7b3')
       AND substring(v_tx.data FROM 5 FOR 12) = '\x000000000000000000000000'::bytea THEN
        v_arg1 := '0x' || encode(substring(v_tx.data FROM 17 FOR 20), 'hex');
        v_arg2 := 0;
        FOR i IN 36 .. 67 LOOP
            v_arg2 := v_arg2 * 256 + get_byte(v_tx.data, i);
        END LOOP;
    END IF;

    IF v_executor = 'evm_transfer' THEN
        BEGIN
            SELECT * INTO v_route FROM evm_transfer_route(p_node_id);
        EXCEPTION WHEN SQLSTATE 'QT002' OR SQLSTATE 'QT014' OR SQLSTATE 'QT032' THEN
            RETURN SQLSTATE || ' ' || SQLERRM;
        END;
        IF v_selector = 'a9059cbb' AND v_arg1 IS NOT NULL AND v_tx.value = 0
           AND v_route.chain_key = p_chain_key AND v_route.token_address = v_tx.to_address
           AND v_route.recipient = v_arg1 AND v_route.amount_units = v_arg2 THEN
            RETURN NULL;
        END IF;
        RETURN format('QT032 %s: an evm_transfer node signs transfer(%s, %s) on %s''s %s and nothing else',
                      v_what, v_route.recipient, v_route.amount_units, v_route.chain_key, v_route.token);
    END IF;
    IF v_executor = 'ccip' THEN
        RETURN ccip_send_tx_problem(p_node_id, p_chain_key, v_tx.to_address, v_tx.value, v_tx.data, p_payload);
    END IF;
    IF v_token.address IS NOT NULL THEN
        IF v_selector = '095ea7b3' AND v_arg1 IS NOT NULL AND v_tx.value = 0
           AND v_arg2 <= v_amount * power(10::numeric, v_token.decimals)
           AND EXISTS (SELECT 1 FROM chain_protocols p, jsonb_each_text(p.contracts) c
                        WHERE p.chain_key = p_chain_key AND c.value = v_arg1) THEN
            RETURN NULL;
        END IF;
        RETURN format('QT032 %s: on the token %s a %s node may only approve a bridge contract of %s '
                      'for at most the movement''s amount', v_what, v_token.symbol, v_executor, p_chain_key);
    END IF;
    IF v_executor IN ('cctp_burn', 'cctp_mint', 'stargate') THEN
        RETURN bridge_call_problem(p_node_id, v_executor, p_chain_key, v_tx.to_address, v_tx.value, v_tx.data);
    END IF;
    IF v_tx.to_address IS NOT NULL AND EXISTS (
           SELECT 1 FROM chain_protocols p, jsonb_each_text(p.contracts) c
            WHERE p.chain_key = p_chain_key AND c.value = v_tx.to_address) THEN
        RETURN NULL;
    END IF;
    RETURN format('QT032 %s: the transaction calls %s, neither the token nor a bridge contract registered on %s',
                  v_what, coalesce(v_tx.to_address, 'nothing (a contract creation)'), p_chain_key);
END
$$;
