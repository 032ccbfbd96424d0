-- evm_transfer_route: what an ERC-20 transfer node may sign, as the chain
-- registry says now. From the node's config (chain, token, from, to) and its
-- movement's amount: the chain (id, the NAME of its RPC URL's environment
-- variable, finality depth, block time, fee caps), the token contract and its
-- decimals, the sender (a treasury account, with the id of the signer holding
-- its key), the recipient and why it may receive (another treasury account of
-- the chain, or an allow-listed destination), the amount in the token's
-- base units, and the sender's next nonce as the engine has it (evm_next_nonce;
-- NULL before its first), so that signing needs no second query. The allow-list rule lives here: an executor signs only what this
-- returns, read again before every signature.
-- QT011 no such node; QT014 the chain, the token or the sender is not
-- registered (the sender: not a treasury account of the chain); QT032 the
-- recipient is neither a treasury account nor allow-listed on the chain;
-- QT002 a config without these keys, or an amount finer than the token's
-- decimals. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION evm_transfer_route(p_node_id bigint)
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
    next_nonce               bigint
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_what      text := format('evm_transfer_route: node %s', coalesce(p_node_id::text, 'NULL'));
    v_config    jsonb;
    v_amount    numeric;
    v_chain     chains;
    v_token     chain_tokens;
    v_sender    text;
    v_recipient text;
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['chain', 'from', 'to'], v_what || ' does not exist',
                      'Pass the id of a node of an evm_transfer step.',
                      v_what || ' has no chain, from and to in its config',
                      'An evm_transfer step names its chain, from and to.');
    v_sender := evm_address(v_what || ': from', v_config ->> 'from');
    v_recipient := evm_address(v_what || ': to', v_config ->> 'to');

    v_chain := route_chain(v_what || ': chain', v_config ->> 'chain');
    v_token := route_token(v_what, v_chain.chain_key, coalesce(v_config ->> 'token', 'USDC'));
    RETURN QUERY SELECT v_chain.chain_key, v_chain.chain_id, v_chain.rpc_url_env, v_chain.finality_depth,
                        v_chain.block_time_ms, v_chain.max_fee_per_gas, v_chain.max_priority_fee_per_gas,
                        v_token.symbol, v_token.address, v_token.decimals,
                        v_sender, treasury_signer(v_what || ': from', v_chain.chain_key, v_sender),
                        v_recipient, destination_kind(v_what || ': to', v_chain.chain_key, v_recipient),
                        token_units(v_what || ': amount', v_amount, v_token),
                        engine_next_nonce(v_chain.chain_key, v_sender);
END
$$;
