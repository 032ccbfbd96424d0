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
    v_what      text := format('bybit_withdraw_route: node %s', coalesce(p_node_id::text, 'NULL'));
    v_config    jsonb;
    v_amount    numeric;
    v_venue     exchange_venues;
    v_chain     chains;
    v_name      text;
    v_token     chain_tokens;
    v_recipient text;
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['venue', 'coin', 'chain', 'to'], v_what || ' does not exist',
                      'Pass the id of a node of a bybit_withdraw step.',
                      v_what || ' has no venue, coin, chain and to in its config',
                      'A bybit_withdraw step names its venue, coin, chain and to.');
    v_recipient := evm_address(v_what || ': to', v_config ->> 'to');

    v_venue := route_venue(v_what, v_config ->> 'venue');
    v_chain := route_chain(v_what || ': chain', v_config ->> 'chain');
    v_name := route_venue_chain(v_what, v_venue.venue_key, v_chain.chain_key, v_chain.chain_key);
    v_token := registry_row((SELECT t FROM chain_tokens t WHERE t.chain_key = v_chain.chain_key
                                                            AND t.symbol = v_config ->> 'coin'),
                            format('%s: coin %s is not a registered token of chain %s', v_what,
                                   coalesce(quote_literal(left(v_config ->> 'coin', 80)), '<NULL>'), v_chain.chain_key),
                            'The chain_tokens table lists the tokens of each chain.');
    RETURN QUERY SELECT v_venue.venue_key, v_venue.kind, v_venue.base_url_env, v_venue.key_file_env,
                        v_venue.request_salt, v_chain.chain_key, v_name, v_chain.chain_id, v_chain.rpc_url_env, v_chain.finality_depth,
                        v_chain.block_time_ms, v_token.symbol, v_token.address, v_token.decimals,
                        v_recipient, destination_kind(v_what || ': to', v_chain.chain_key, v_recipient),
                        -- the exchange's decimal string: no exponent, no trailing zeros
                        trim_scale(v_amount)::text,
                        token_units(v_what || ': amount', v_amount, v_token);
END
$$;
