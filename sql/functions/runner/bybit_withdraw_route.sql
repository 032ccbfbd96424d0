-- bybit_withdraw_route: what a bybit_withdraw node may request, as the
-- registry says now. From the node's config (venue, coin, chain, to) and its
-- movement's amount: the venue (its kind and the NAMES of the environment
-- variables of its base URL and API key file, and the salt of its requestIds),
-- the venue's name for the chain,
-- the chain (id, RPC URL's variable, finality depth, block time) and the
-- coin's token contract on it (to check the Transfer that lands), the
-- recipient and why it may receive (a treasury account of the chain, or
-- allow-listed on it), and the amount as the exchange's decimal string and in
-- the token's base units. The allow-list rule lives here: the executor
-- requests only what this returns, read again before the request.
-- QT011 no such node; QT014 the venue, the chain, the venue's name for it or
-- the coin's token is not registered; QT032 the recipient is neither a
-- treasury account nor allow-listed on the chain; QT002 a config without these
-- keys, a malformed address, or an amount finer than the token's decimals.
-- Reads only; takes no lock.
CREATE OR REPLACE FUNCTION bybit_withdraw_route(p_node_id bigint)
RETURNS TABLE (
    venue_key      text,
    kind           text,
    base_url_env   text,
    key_file_env   text,
    request_salt   text,
    chain_key      text,
    venue_chain    text,
    chain_id       bigint,
    rpc_url_env    text,
    finality_depth integer,
    block_time_ms  integer,
    coin           text,
    token_address  text,
    decimals       smallint,
    recipient      text,
    recipient_kind text,
    amount         text,
    amount_units   numeric
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_config    jsonb;
    v_amount    numeric;
    v_venue     exchange_venues;
    v_chain     chains;
    v_name      text;
    v_token     chain_tokens;
    v_recipient text;
    v_kind      text;
    v_units     numeric;
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['venue', 'coin', 'chain', 'to'],
                      format('bybit_withdraw_route: node %s does not exist', coalesce(p_node_id::text, 'NULL')),
                      'Pass the id of a node of a bybit_withdraw step.',
                      format('bybit_withdraw_route: node %s has no venue, coin, chain and to in its config', p_node_id),
                      'A bybit_withdraw step names its venue, coin, chain and to.');
    v_recipient := evm_address(format('bybit_withdraw_route: node %s: to', p_node_id), v_config ->> 'to');

    v_venue := route_venue(format('bybit_withdraw_route: node %s', p_node_id), v_config ->> 'venue');
    v_chain := route_chain(format('bybit_withdraw_route: node %s: chain', p_node_id), v_config ->> 'chain');
    v_name := route_venue_chain(format('bybit_withdraw_route: node %s', p_node_id), v_venue.venue_key,
                                v_chain.chain_key, v_chain.chain_key);
    SELECT * INTO v_token FROM chain_tokens t
     WHERE t.chain_key = v_chain.chain_key AND t.symbol = v_config ->> 'coin';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'bybit_withdraw_route: node %: coin % is not a registered token of chain %', p_node_id,
                        quote_literal(left(v_config ->> 'coin', 80)), v_chain.chain_key
            USING ERRCODE = 'QT014', HINT = 'The chain_tokens table lists the tokens of each chain.';
    END IF;
    v_kind := destination_kind(format('bybit_withdraw_route: node %s: to', p_node_id), v_chain.chain_key, v_recipient);
    v_units := token_units(format('bybit_withdraw_route: node %s: amount', p_node_id), v_amount, v_token);
    RETURN QUERY SELECT v_venue.venue_key, v_venue.kind, v_venue.base_url_env, v_venue.key_file_env,
                        v_venue.request_salt, v_chain.chain_key, v_name, v_chain.chain_id, v_chain.rpc_url_env, v_chain.finality_depth,
                        v_chain.block_time_ms, v_token.symbol, v_token.address, v_token.decimals,
                        v_recipient, v_kind,
                        -- the exchange's decimal string: no exponent, no trailing zeros
                        trim_scale(v_amount)::text,
                        v_units;
END
$$;
