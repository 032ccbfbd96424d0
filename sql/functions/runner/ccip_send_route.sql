-- ccip_send_route: what a CCIP send node may sign, as the registry says now.
-- From the node's config (chain, destination_chain, from, to, token) and its
-- movement's amount: the source chain (id, the NAME of its RPC URL's
-- environment variable, finality depth, block time, fee caps), the token and
-- its contract there, its CCIP row (selector, Router), the sender (a
-- treasury account of the source chain, with its signer's id), the
-- destination chain (id, RPC URL's variable, finality depth, block time), its
-- CCIP row (selector) and its token's contract, the lane (ccip_lanes: its
-- CCIP version, the OnRamp on the source and the OffRamp on the destination
-- whose events tell the send's fate, the fee margin over the Router's quote
-- in basis points and the most a send pays), the receiver (a treasury account
-- or allow-listed on the DESTINATION chain, the chain the money lands on), the
-- amount in base units, the message's gas limit (0: the engine's sends are
-- token-only, to an account, so no receiver callback runs on the destination
-- and no destination gas is paid for), and the sender's next nonce as the
-- engine has it. The send signs only what this returns, read again before
-- every signature.
-- QT011 no such node; QT014 a chain, the token on either chain, a CCIP row,
-- the lane or the sender not registered; QT032 the receiver neither a
-- treasury account nor allow-listed on the destination chain; QT002 a config
-- without these keys, the same chain on both sides, or an amount finer than
-- the token's decimals or not above zero. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION ccip_send_route(p_node_id bigint)
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
    source_selector          numeric,
    router                   text,
    onramp                   text,
    sender                   text,
    signer_id                text,
    dest_chain_key           text,
    dest_chain_id            bigint,
    dest_rpc_url_env         text,
    dest_finality_depth      integer,
    dest_block_time_ms       integer,
    dest_selector            numeric,
    dest_offramp             text,
    dest_token_address       text,
    recipient                text,
    recipient_kind           text,
    amount_units             numeric,
    next_nonce               bigint,
    ccip_version             text,
    gas_limit                integer,
    fee_margin_bps           integer,
    max_fee_wei              numeric
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_what       text := format('ccip_send_route: node %s', coalesce(p_node_id::text, 'NULL'));
    v_config     jsonb;
    v_amount     numeric;
    v_symbol     text;
    v_chain      chains;
    v_dest_chain chains;
    v_token      chain_tokens;
    v_dest_token chain_tokens;
    v_source     chain_protocols;
    v_dest       chain_protocols;
    v_lane       ccip_lanes;
    v_sender     text;
    v_signer     text;
    v_recipient  text;
    v_kind       text;
    v_units      numeric;
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['chain', 'destination_chain', 'from', 'to'], v_what || ': no such node',
                      'Pass the id of a node of a ccip step.',
                      v_what || ': its config needs chain, destination_chain, from and to',
                      'A ccip step names both chains, the sender and the receiver.');
    IF v_config ->> 'chain' = v_config ->> 'destination_chain' THEN
        RAISE EXCEPTION '%: chain and destination_chain are both %', v_what, v_config ->> 'chain'
            USING ERRCODE = 'QT002', HINT = 'A CCIP send moves tokens to another chain; on one chain use evm_transfer.';
    END IF;
    v_sender := evm_address(v_what || ': from', v_config ->> 'from');
    v_recipient := evm_address(v_what || ': to', v_config ->> 'to');
    v_symbol := coalesce(v_config ->> 'token', 'USDC');

    v_chain := route_chain(v_what || ': chain', v_config ->> 'chain');
    v_dest_chain := route_chain(v_what || ': chain', v_config ->> 'destination_chain');
    v_token := route_token(v_what, v_chain.chain_key, v_symbol,
                           'The chain_tokens table lists the tokens of each chain: a send needs it on both.');
    v_dest_token := route_token(v_what, v_dest_chain.chain_key, v_symbol,
                                'The chain_tokens table lists the tokens of each chain: a send needs it on both.');
    v_source := chain_protocol(v_chain.chain_key, 'ccip');
    v_dest := chain_protocol(v_dest_chain.chain_key, 'ccip');
    v_lane := ccip_lane(v_chain.chain_key, v_dest_chain.chain_key);
    v_signer := treasury_signer(v_what || ': from', v_chain.chain_key, v_sender);
    v_kind := destination_kind(v_what || ': to, on the destination chain', v_dest_chain.chain_key, v_recipient);
    v_units := token_units(v_what || ': amount', v_amount, v_token);

    RETURN QUERY SELECT v_chain.chain_key, v_chain.chain_id, v_chain.rpc_url_env, v_chain.finality_depth,
                        v_chain.block_time_ms, v_chain.max_fee_per_gas, v_chain.max_priority_fee_per_gas,
                        v_token.symbol, v_token.address, v_source.remote_id,
                        v_source.contracts ->> 'CcipRouter', v_lane.onramp,
                        v_sender, v_signer,
                        v_dest_chain.chain_key, v_dest_chain.chain_id, v_dest_chain.rpc_url_env,
                        v_dest_chain.finality_depth, v_dest_chain.block_time_ms, v_dest.remote_id,
                        v_lane.offramp, v_dest_token.address,
                        v_recipient, v_kind, v_units,
                        engine_next_nonce(v_chain.chain_key, v_sender),
                        v_lane.version, 0, v_lane.fee_margin_bps, v_lane.max_fee_wei;
END
$$;
