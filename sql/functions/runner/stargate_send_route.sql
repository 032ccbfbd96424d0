-- stargate_send_route: what a Stargate send node may sign, as the chain registry
-- says now. From the node's config (source, destination, from, to, token, mode,
-- min_amount or max_slippage_bps) and its movement's amount: the source chain
-- (id, the NAME of its RPC URL's environment variable, finality depth, block
-- time, fee caps), the token there and on the destination, the sender (a
-- treasury account of the source, with its signer's id), the recipient and why
-- it may receive ON THE DESTINATION (a treasury account of the destination, or
-- allow-listed there), the amount and the least the recipient must receive in
-- the token's base units (min_amount, else the amount less max_slippage_bps,
-- 50 when neither is given), the mode (taxi or bus), both chains' Stargate
-- rows (endpoint id and pool: chain_protocols; on the source also its
-- TokenMessaging, which emits a bus ride's BusRode and BusDriven), the
-- destination chain's reading parameters and the sender's next nonce as the
-- engine has it. An executor signs only what this returns, read again before
-- every signature (the call goes to the source pool, never to TokenMessaging).
-- QT011 no such node; QT014 a chain, the token, Stargate on either chain (the
-- pool on both, TokenMessaging on the source) or the sender is not registered
-- (the sender: not a treasury account of the source); QT032 the recipient is
-- neither a treasury account nor allow-listed on the destination; QT002 a
-- config without these keys, the same chain at both ends, a mode other than
-- taxi or bus, an amount finer than the token's decimals, or a minimum above
-- the amount. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION stargate_send_route(p_node_id bigint)
RETURNS TABLE (
    chain_key                text,
    chain_id                 bigint,
    rpc_url_env              text,
    finality_depth           integer,
    block_time_ms            integer,
    max_fee_per_gas          numeric,
    max_priority_fee_per_gas numeric,
    token                    text,
    token_address            text,
    decimals                 smallint,
    sender                   text,
    signer_id                text,
    recipient                text,
    recipient_kind           text,
    amount_units             numeric,
    min_amount_units         numeric,
    mode                     text,
    src_eid                  bigint,
    src_pool                 text,
    src_token_messaging      text,
    dst_chain_key            text,
    dst_chain_id             bigint,
    dst_rpc_url_env          text,
    dst_finality_depth       integer,
    dst_block_time_ms        integer,
    dst_eid                  bigint,
    dst_pool                 text,
    dst_token_address        text,
    next_nonce               bigint
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_what      text := format('stargate_send_route: node %s', coalesce(p_node_id::text, 'NULL'));
    v_config    jsonb;
    v_amount    numeric;
    v_src       chains;
    v_dst       chains;
    v_token     chain_tokens;
    v_dst_token chain_tokens;
    v_src_sg    chain_protocols;
    v_dst_sg    chain_protocols;
    v_sender    text;
    v_recipient text;
    v_signer    text;
    v_kind      text;
    v_mode      text;
    v_symbol    text;
    v_units     numeric;
    v_min       numeric;
    v_bps       numeric;
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['source', 'destination', 'from', 'to'], v_what || ' does not exist',
                      'Pass the id of a node of a stargate step.',
                      v_what || ' has no source, destination, from and to in its config',
                      'A stargate step names its source and destination chains, from and to.');
    IF v_config ->> 'source' = v_config ->> 'destination' THEN
        RAISE EXCEPTION '%: source and destination are the same chain %', v_what,
                        quote_literal(v_config ->> 'source')
            USING ERRCODE = 'QT002', HINT = 'A transfer on one chain is an evm_transfer step.';
    END IF;
    v_mode := coalesce(v_config ->> 'mode', 'taxi');
    IF v_mode NOT IN ('taxi', 'bus') THEN
        RAISE EXCEPTION '%: mode % is neither taxi nor bus', v_what, quote_literal(v_mode)
            USING ERRCODE = 'QT002', HINT = 'Give mode taxi (a message at once) or bus (batched, cheaper).';
    END IF;
    v_sender := evm_address(v_what || ': from', v_config ->> 'from');
    v_recipient := evm_address(v_what || ': to', v_config ->> 'to');

    v_src := route_chain(v_what || ': source chain', v_config ->> 'source');
    v_dst := route_chain(v_what || ': destination chain', v_config ->> 'destination');
    v_symbol := coalesce(v_config ->> 'token', 'USDC');
    SELECT * INTO v_token FROM chain_tokens t WHERE t.chain_key = v_src.chain_key AND t.symbol = v_symbol;
    IF FOUND THEN
        SELECT * INTO v_dst_token FROM chain_tokens t WHERE t.chain_key = v_dst.chain_key AND t.symbol = v_symbol;
    END IF;
    IF v_token.chain_key IS NULL OR v_dst_token.chain_key IS NULL THEN
        RAISE EXCEPTION '%: token % is not registered on both % and %', v_what,
                        quote_literal(v_symbol), v_src.chain_key, v_dst.chain_key
            USING ERRCODE = 'QT014', HINT = 'The chain_tokens table lists the tokens of each chain.';
    END IF;
    v_src_sg := chain_protocol(v_src.chain_key, 'stargate');
    v_dst_sg := chain_protocol(v_dst.chain_key, 'stargate');
    IF NOT (v_src_sg.contracts ?& ARRAY['StargatePool', 'TokenMessaging'] AND v_dst_sg.contracts ? 'StargatePool') THEN
        RAISE EXCEPTION '%: the Stargate rows of % and % do not name the source''s StargatePool and '
                        'TokenMessaging and the destination''s StargatePool', v_what,
                        v_src.chain_key, v_dst.chain_key
            USING ERRCODE = 'QT014',
                  HINT = 'Register each chain''s pool and TokenMessaging as contracts.StargatePool and '
                         'contracts.TokenMessaging with upsert_chain_protocol.';
    END IF;
    v_signer := treasury_signer(v_what || ': from', v_src.chain_key, v_sender);
    v_kind := destination_kind(v_what || ': to, on the destination chain', v_dst.chain_key, v_recipient);
    v_units := token_units(v_what || ': amount', v_amount, v_token);
    IF v_config ? 'min_amount' THEN
        IF (CASE WHEN coalesce(v_config ->> 'min_amount', '') !~ '^[0-9]{1,30}(\.[0-9]{1,30})?$' THEN true
                ELSE (v_config ->> 'min_amount')::numeric > v_amount END) THEN
            RAISE EXCEPTION '%: min_amount % is not an amount between 0 and the movement''s %', v_what,
                            coalesce(quote_literal(left(v_config ->> 'min_amount', 40)), 'NULL'), v_amount
                USING ERRCODE = 'QT002', HINT = 'Give min_amount as a decimal string no greater than the amount.';
        END IF;
        v_min := token_units(v_what || ': min_amount', (v_config ->> 'min_amount')::numeric, v_token);
    ELSE
        IF (CASE WHEN coalesce(v_config ->> 'max_slippage_bps', '50') !~ '^[0-9]{1,5}$' THEN true
                ELSE (v_config ->> 'max_slippage_bps')::integer > 10000 END) THEN
            RAISE EXCEPTION '%: max_slippage_bps % is not a whole number from 0 to 10000', v_what,
                            quote_literal(left(v_config ->> 'max_slippage_bps', 40))
                USING ERRCODE = 'QT002', HINT = 'Give max_slippage_bps in basis points (50 is 0.5 %), or min_amount.';
        END IF;
        v_bps := coalesce(v_config ->> 'max_slippage_bps', '50')::numeric;
        v_min := v_units - floor(v_units * v_bps / 10000);
    END IF;
    RETURN QUERY SELECT v_src.chain_key, v_src.chain_id, v_src.rpc_url_env, v_src.finality_depth,
                        v_src.block_time_ms, v_src.max_fee_per_gas, v_src.max_priority_fee_per_gas,
                        v_token.symbol, v_token.address, v_token.decimals, v_sender, v_signer, v_recipient, v_kind,
                        trunc(v_units), trunc(v_min), v_mode,
                        v_src_sg.remote_id::bigint, v_src_sg.contracts ->> 'StargatePool',
                        v_src_sg.contracts ->> 'TokenMessaging',
                        v_dst.chain_key, v_dst.chain_id, v_dst.rpc_url_env, v_dst.finality_depth, v_dst.block_time_ms,
                        v_dst_sg.remote_id::bigint, v_dst_sg.contracts ->> 'StargatePool', v_dst_token.address,
                        engine_next_nonce(v_src.chain_key, v_sender);
END
$$;
