-- cctp_burn_route: what a CCTP v2 burn node may sign, as the registry says now.
-- From the node's config (chain, destination_chain, from, to, finality,
-- max_fee_bps) and its movement's amount: the source chain (id, the NAME of
-- its RPC URL's environment variable, finality depth, block time, fee caps),
-- its USDC and its CCTP row (domain, TokenMessengerV2, MessageTransmitterV2),
-- the sender (a treasury account of the source chain, with its signer's id),
-- the destination chain's CCTP domain and contracts, the mint recipient (a
-- treasury account or allow-listed on the DESTINATION chain, the chain the
-- money lands on), the amount in base units, maxFee (max_fee_bps of the
-- amount, default 10, at most 100, as the mint checks it: cctp_fee_bps;
-- always below the amount), the minFinalityThreshold (fast 1000, standard
-- 2000) and the sender's next nonce as the engine has it. The burn signs only
-- what this returns, read again before every signature.
-- QT011 no such node; QT014 a chain, its USDC, its CCTP row or the sender not
-- registered; QT032 the recipient neither a treasury account nor allow-listed
-- on the destination chain; QT002 a config without these keys, the same chain
-- on both sides, an amount finer than 6 decimals or over CCTP's 10M USDC a
-- burn. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION cctp_burn_route(p_node_id bigint)
RETURNS TABLE (
    chain_key                text,
    chain_id                 bigint,
    rpc_url_env              text,
    finality_depth           integer,
    block_time_ms            integer,
    max_fee_per_gas          numeric,
    max_priority_fee_per_gas numeric,
    token_address            text,
    source_domain            bigint,
    token_messenger          text,
    message_transmitter      text,
    sender                   text,
    signer_id                text,
    destination_chain        text,
    destination_domain       bigint,
    destination_token_messenger text,
    mint_recipient           text,
    recipient_kind           text,
    amount_units             numeric,
    max_fee_units            numeric,
    min_finality_threshold   integer,
    next_nonce               bigint
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_what      text := format('cctp_burn_route: node %s', coalesce(p_node_id::text, 'NULL'));
    v_config    jsonb;
    v_amount    numeric;
    v_chain     chains;
    v_token     chain_tokens;
    v_source    chain_protocols;
    v_dest      chain_protocols;
    v_sender    text;
    v_recipient text;
    v_bps       numeric;
    v_units     numeric;
    v_needs     text := 'its config needs chain, destination_chain, from, to and finality (fast or standard)';
    v_needs_why text := 'A cctp_burn step names both chains, from, to and its finality.';
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['chain', 'destination_chain', 'from', 'to', 'finality'],
                      v_what || ': no such node', 'Pass the id of a node of a cctp_burn step.',
                      v_what || ': ' || v_needs, v_needs_why);
    IF v_config ->> 'finality' NOT IN ('fast', 'standard') THEN
        RAISE EXCEPTION '%: %', v_what, v_needs USING ERRCODE = 'QT002', HINT = v_needs_why;
    END IF;
    IF v_config ->> 'chain' = v_config ->> 'destination_chain' THEN
        RAISE EXCEPTION '%: chain and destination_chain are both %', v_what, v_config ->> 'chain'
            USING ERRCODE = 'QT002', HINT = 'A burn moves USDC to another chain; on one chain use evm_transfer.';
    END IF;
    v_sender := evm_address(v_what || ': from', v_config ->> 'from');
    v_recipient := evm_address(v_what || ': to', v_config ->> 'to');
    v_bps := cctp_fee_bps(v_what, v_config ->> 'max_fee_bps', 'The burn''s maxFee is capped at 1% of its amount.');

    v_chain := route_chain(v_what || ': chain', v_config ->> 'chain');
    SELECT * INTO v_token FROM chain_tokens t WHERE t.chain_key = v_chain.chain_key AND t.symbol = 'USDC';
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: USDC is not registered on chain %', v_what, v_chain.chain_key
            USING ERRCODE = 'QT014', HINT = 'The chain_tokens table lists the tokens of each chain.';
    END IF;
    v_source := chain_protocol(v_chain.chain_key, 'cctp');
    v_dest := chain_protocol(v_config ->> 'destination_chain', 'cctp');
    v_units := token_units(v_what || ': amount', v_amount, v_token);
    IF v_amount > 10000000 THEN
        RAISE EXCEPTION '%: amount % is over CCTP''s 10M USDC a burn', v_what, v_amount
            USING ERRCODE = 'QT002', HINT = 'Split a larger movement into burns of at most 10M USDC.';
    END IF;

    RETURN QUERY SELECT v_chain.chain_key, v_chain.chain_id, v_chain.rpc_url_env, v_chain.finality_depth,
                        v_chain.block_time_ms, v_chain.max_fee_per_gas, v_chain.max_priority_fee_per_gas,
                        v_token.address, v_source.remote_id::bigint,
                        v_source.contracts ->> 'TokenMessengerV2', v_source.contracts ->> 'MessageTransmitterV2',
                        v_sender, treasury_signer(v_what || ': from', v_chain.chain_key, v_sender),
                        v_dest.chain_key, v_dest.remote_id::bigint, v_dest.contracts ->> 'TokenMessengerV2',
                        v_recipient, destination_kind(v_what || ': to', v_dest.chain_key, v_recipient),
                        v_units, trunc(v_units * v_bps / 10000),
                        CASE v_config ->> 'finality' WHEN 'fast' THEN 1000 ELSE 2000 END,
                        engine_next_nonce(v_chain.chain_key, v_sender);
END
$$;
