-- cctp_mint_route: what a CCTP v2 mint node may sign, and what the burn it
-- mints must show, as the registry says now. From the node's config (chain:
-- the destination, source_chain, from: the treasury account paying the gas,
-- to: the recipient the movement asked for, max_fee_bps) and its movement's
-- amount: the destination chain (id, the NAME of its RPC URL's environment
-- variable, finality depth, block time, fee caps), its USDC and its CCTP row
-- (domain, MessageTransmitterV2, TokenMessengerV2), the sender with its
-- signer's id, the source chain's CCTP domain, TokenMessengerV2 and USDC (the
-- burn token the message must name), the expected recipient (a treasury
-- account or allow-listed on this chain), the amount burnt in base units and
-- the most fee the mint accepts (max_fee_bps of it, default 10, at most 100,
-- as the burn caps it: cctp_fee_bps),
-- and the sender's next nonce. The mint refuses a burn's evidence that does not
-- match these before it signs anything.
-- QT011 no such node; QT014 a chain, its USDC, its CCTP row or the sender not
-- registered; QT032 the recipient neither a treasury account nor allow-listed
-- on this chain; QT002 a config without these keys, the same chain on both
-- sides, or an amount finer than 6 decimals. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION cctp_mint_route(p_node_id bigint)
RETURNS TABLE (
    chain_key                text,
    chain_id                 bigint,
    rpc_url_env              text,
    finality_depth           integer,
    block_time_ms            integer,
    max_fee_per_gas          numeric,
    max_priority_fee_per_gas numeric,
    token_address            text,
    destination_domain       bigint,
    message_transmitter      text,
    token_messenger          text,
    sender                   text,
    signer_id                text,
    source_chain             text,
    source_domain            bigint,
    source_token_messenger   text,
    source_token             text,
    mint_recipient           text,
    recipient_kind           text,
    amount_units             numeric,
    max_fee_units            numeric,
    next_nonce               bigint
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_what         text := format('cctp_mint_route: node %s', coalesce(p_node_id::text, 'NULL'));
    v_config       jsonb;
    v_amount       numeric;
    v_chain        chains;
    v_token        chain_tokens;
    v_source_token chain_tokens;
    v_dest         chain_protocols;
    v_source       chain_protocols;
    v_sender       text;
    v_recipient    text;
    v_bps          numeric;
    v_units        numeric;
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['chain', 'source_chain', 'from', 'to'],
                      v_what || ': no such node', 'Pass the id of a node of a cctp_mint step.',
                      v_what || ': its config needs chain, source_chain, from and to',
                      'A cctp_mint step names both chains, the gas payer and the recipient.');
    IF v_config ->> 'chain' = v_config ->> 'source_chain' THEN
        RAISE EXCEPTION '%: chain and source_chain are both %', v_what, v_config ->> 'chain'
            USING ERRCODE = 'QT002', HINT = 'A mint lands a burn from another chain.';
    END IF;
    v_sender := evm_address(v_what || ': from', v_config ->> 'from');
    v_recipient := evm_address(v_what || ': to', v_config ->> 'to');
    v_bps := cctp_fee_bps(v_what, v_config ->> 'max_fee_bps', 'The fee a mint accepts is capped at 1% of the amount.');

    v_chain := route_chain(v_what || ': chain', v_config ->> 'chain');
    SELECT * INTO v_token FROM chain_tokens t WHERE t.chain_key = v_chain.chain_key AND t.symbol = 'USDC';
    SELECT * INTO v_source_token FROM chain_tokens t WHERE t.chain_key = v_config ->> 'source_chain' AND t.symbol = 'USDC';
    IF v_token.address IS NULL OR v_source_token.address IS NULL THEN
        RAISE EXCEPTION '%: USDC is not registered on chain % or %', v_what, v_chain.chain_key,
                        quote_literal(v_config ->> 'source_chain')
            USING ERRCODE = 'QT014', HINT = 'The chain_tokens table lists the tokens of each chain.';
    END IF;
    v_dest := chain_protocol(v_chain.chain_key, 'cctp');
    v_source := chain_protocol(v_config ->> 'source_chain', 'cctp');
    v_units := token_units(v_what || ': amount', v_amount, v_token);

    RETURN QUERY SELECT v_chain.chain_key, v_chain.chain_id, v_chain.rpc_url_env, v_chain.finality_depth,
                        v_chain.block_time_ms, v_chain.max_fee_per_gas, v_chain.max_priority_fee_per_gas,
                        v_token.address, v_dest.remote_id::bigint,
                        v_dest.contracts ->> 'MessageTransmitterV2', v_dest.contracts ->> 'TokenMessengerV2',
                        v_sender, treasury_signer(v_what || ': from', v_chain.chain_key, v_sender),
                        v_source.chain_key, v_source.remote_id::bigint, v_source.contracts ->> 'TokenMessengerV2',
                        v_source_token.address,
                        v_recipient, destination_kind(v_what || ': to', v_chain.chain_key, v_recipient),
                        v_units, trunc(v_units * v_bps / 10000),
                        engine_next_nonce(v_chain.chain_key, v_sender);
END
$$;
