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
    SELECT n.node_config, r.amount INTO v_config, v_amount
      FROM movement_request_nodes n
      JOIN movement_requests r ON r.id = n.request_id
     WHERE n.id = p_node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'bybit_withdraw_route: node % does not exist', coalesce(p_node_id::text, 'NULL')
            USING ERRCODE = 'QT011', HINT = 'Pass the id of a node of a bybit_withdraw step.';
    END IF;
    IF NOT (v_config ?& ARRAY['venue', 'coin', 'chain', 'to']) THEN
        RAISE EXCEPTION 'bybit_withdraw_route: node % has no venue, coin, chain and to in its config', p_node_id
            USING ERRCODE = 'QT002', HINT = 'A bybit_withdraw step names its venue, coin, chain and to.';
    END IF;
    v_recipient := evm_address(format('bybit_withdraw_route: node %s: to', p_node_id), v_config ->> 'to');

    SELECT * INTO v_venue FROM exchange_venues v WHERE v.venue_key = v_config ->> 'venue';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'bybit_withdraw_route: node %: venue % is not registered on this network', p_node_id,
                        quote_literal(left(v_config ->> 'venue', 80))
            USING ERRCODE = 'QT014', HINT = 'The exchange_venues table lists the registered venues.';
    END IF;
    SELECT * INTO v_chain FROM chains c WHERE c.chain_key = v_config ->> 'chain';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'bybit_withdraw_route: node %: chain % is not registered on this network', p_node_id,
                        quote_literal(left(v_config ->> 'chain', 80))
            USING ERRCODE = 'QT014', HINT = 'The chains table lists the registered chains.';
    END IF;
    SELECT vc.venue_chain INTO v_name FROM venue_chains vc
     WHERE vc.venue_key = v_venue.venue_key AND vc.chain_key = v_chain.chain_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'bybit_withdraw_route: node %: venue % has no name for chain %', p_node_id,
                        v_venue.venue_key, v_chain.chain_key
            USING ERRCODE = 'QT014', HINT = 'The admin names the chain at the venue with upsert_venue_chain.';
    END IF;
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
