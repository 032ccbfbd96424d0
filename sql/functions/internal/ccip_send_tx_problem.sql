-- ccip_send_tx_problem: why the signed call a ccip node records may not be
-- broadcast, or NULL when it may (intent_tx_problem asks it for a ccip node,
-- after the chain id, nonce and fee caps, with the payload recorded with it):
-- the call must be exactly the Router.ccipSend ccip_send_route says, byte for
-- byte: to the route's Router, ccipSend(destination selector,
-- EVM2AnyMessage{receiver: abi.encode(the route's receiver), data: empty,
-- tokenAmounts: [(the route's token, its amount in base units)], feeToken:
-- native, extraArgs: GenericExtraArgsV2(gasLimit: the route's 0, a token-only
-- message, out of order allowed)}) in the canonical ABI encoding the executor
-- signs (qtg_runner.chains.ccip.ccip_send_calldata); and its value, the native
-- fee, exactly the Router's quote the payload records (ccip_fee, what
-- Router.getFee answered at prepare) and the lane's margin of it in basis
-- points, rounded up (qtg_runner.chains.ccip.fee_with_margin), at most the
-- lane's max_fee_wei: a fee risen by up to the margin between the quote and
-- the send's block is paid, and no send pays more than the lane allows (the
-- Router keeps what is paid over its fee).
-- The answer is 'QTnnn message'. Reads only. Internal.
CREATE OR REPLACE FUNCTION ccip_send_tx_problem(
    p_node_id   bigint,
    p_chain_key text,
    p_to        text,
    p_value     numeric,
    p_data      bytea,
    p_payload   jsonb
) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_what     text := format('record_intent_prepared: node %s', p_node_id);
    v_route    record;
    v_expected bytea;
    v_quote    numeric;
    v_fee      numeric;
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
        || ccip_word(68) || '\x181dcf10'::bytea || ccip_word(v_route.gas_limit) || ccip_word(1)
        || ('\x' || repeat('00', 28))::bytea;
    IF p_to IS DISTINCT FROM v_route.router
       OR p_data IS DISTINCT FROM v_expected THEN
        RETURN format('QT032 %s: a ccip node signs Router.ccipSend on %s''s Router %s of %s base units to %s on %s '
                      '(the canonical token-only message, gas limit %s) and nothing else',
                      v_what, v_route.chain_key, v_route.router, v_route.amount_units, v_route.recipient,
                      v_route.dest_chain_key, v_route.gas_limit);
    END IF;
    IF coalesce(p_payload ->> 'ccip_fee', '') !~ '^[0-9]{1,30}$' THEN
        RETURN format('QT032 %s: a ccip send records the Router''s fee quote (ccip_fee, in wei) with its signed '
                      'bytes: its fee is that quote and the lane''s margin', v_what);
    END IF;
    v_quote := (p_payload ->> 'ccip_fee')::numeric;
    v_fee := div(v_quote * (10000 + v_route.fee_margin_bps) + 9999, 10000);
    IF p_value IS DISTINCT FROM v_fee OR v_fee > v_route.max_fee_wei THEN
        RETURN format('QT032 %s: a ccip send pays its quote of %s wei and the lane''s %s basis points of it, '
                      '%s wei, at most %s wei; the transaction pays %s', v_what, v_quote, v_route.fee_margin_bps,
                      v_fee, v_route.max_fee_wei, coalesce(p_value::text, 'nothing'));
    END IF;
    RETURN NULL;
END
$$;
