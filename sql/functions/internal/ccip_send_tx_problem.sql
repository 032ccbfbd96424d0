-- ccip_send_tx_problem: why the signed call a ccip node records may not be
-- broadcast, or NULL when it may (intent_tx_problem asks it for a ccip node,
-- after the chain id, nonce and fee caps): the call must be exactly the
-- Router.ccipSend ccip_send_route says, byte for byte: to the route's Router,
-- ccipSend(destination selector, EVM2AnyMessage{receiver: abi.encode(the
-- route's receiver), data: empty, tokenAmounts: [(the route's token, its
-- amount in base units)], feeToken: native, extraArgs: EVMExtraArgsV2(gasLimit
-- 200000, out of order allowed)}) in the canonical ABI encoding the executor
-- signs (qtg_runner.chains.ccip.ccip_send_calldata), with at most 1 ether of
-- native fee (the Router keeps what is paid over its fee: a sanity bound).
-- The answer is 'QTnnn message'. Reads only. Internal.
CREATE OR REPLACE FUNCTION ccip_send_tx_problem(
    p_node_id   bigint,
    p_chain_key text,
    p_to        text,
    p_value     numeric,
    p_data      bytea
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_what     text := format('record_intent_prepared: node %s', p_node_id);
    v_route    record;
    v_expected bytea;
BEGIN
    BEGIN
        SELECT * INTO v_route FROM ccip_send_route(p_node_id);
    EXCEPTION WHEN SQLSTATE 'QT002' OR SQLSTATE 'QT014' OR SQLSTATE 'QT032' THEN
        RETURN SQLSTATE || ' ' || SQLERRM;
    END;
    v_expected := '\x96f4e9f9'::bytea  -- ccipSend(uint64,(bytes,bytes,(address,uint256)[],address,bytes))
        || ccip_word(v_route.dest_selector) || ccip_word(64)
        || ccip_word(160) || ccip_word(224) || ccip_word(256) || ccip_word(0) || ccip_word(352)
        || ccip_word(32) || decode(lpad(substr(v_route.recipient, 3), 64, '0'), 'hex')
        || ccip_word(0)
        || ccip_word(1) || decode(lpad(substr(v_route.token_address, 3), 64, '0'), 'hex') || ccip_word(v_route.amount_units)
        || ccip_word(68) || '\x181dcf10'::bytea || ccip_word(200000) || ccip_word(1) || ('\x' || repeat('00', 28))::bytea;
    IF v_route.chain_key = p_chain_key AND p_to = v_route.router AND p_data = v_expected
       AND p_value <= 1000000000000000000 THEN
        RETURN NULL;
    END IF;
    RETURN format('QT032 %s: a ccip node signs Router.ccipSend on %s''s Router %s of %s base units to %s on %s '
                  '(the canonical message, at most 1 ether of fee) and nothing else',
                  v_what, v_route.chain_key, v_route.router, v_route.amount_units, v_route.recipient,
                  v_route.dest_chain_key);
END
$$;
