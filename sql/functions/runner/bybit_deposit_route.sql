-- bybit_deposit_route: where a bybit_deposit node waits for its credit, as the
-- registry says now. From the node's config (venue, chain, coin: USDC unless
-- given) and its movement's amount: the venue (its kind and the NAMES of the
-- environment variables of its base URL and API key file), the venue's name
-- for the chain, the venue's deposit address for the coin there, the
-- amount the deposit should credit (the exchange's decimal string), and
-- since_ms: from when the venue's deposit records are read, a day (for the
-- venue's clock) before the claim of the earliest of its parents' intents
-- that signed or sent anything (PREPARED or SUBMITTED: a claim that failed
-- or was given up before a retry sent nothing), when nothing they pay in can
-- have been sent yet (epoch ms; NULL while no parent has one). The venue
-- reads 29 days from there (venues.RECORD_WINDOW_MS).
-- QT011 no such node; QT014 the venue, the chain's name at the venue or the
-- deposit address is not registered; QT002 a config without venue and chain.
-- Reads only; takes no lock.
CREATE OR REPLACE FUNCTION bybit_deposit_route(p_node_id bigint)
RETURNS TABLE (
    venue_key       text,
    kind            text,
    base_url_env    text,
    key_file_env    text,
    chain_key       text,
    venue_chain     text,
    coin            text,
    deposit_address text,
    amount          text,
    since_ms        bigint
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_what   text := format('bybit_deposit_route: node %s', coalesce(p_node_id::text, 'NULL'));
    v_config jsonb;
    v_amount numeric;
    v_venue  exchange_venues;
    v_name   text;
    v_coin   text;
BEGIN
    SELECT * INTO v_config, v_amount
      FROM route_node(p_node_id, ARRAY['venue', 'chain'], v_what || ' does not exist',
                      'Pass the id of a node of a bybit_deposit step.', v_what || ' has no venue and chain in its config',
                      'A bybit_deposit step names its venue and chain (and coin, USDC unless given).');
    v_coin := coalesce(v_config ->> 'coin', 'USDC');
    v_venue := route_venue(v_what, v_config ->> 'venue');
    v_name := route_venue_chain(v_what, v_venue.venue_key, v_config ->> 'chain',
                                quote_literal(left(v_config ->> 'chain', 80)));
    RETURN QUERY SELECT v_venue.venue_key, v_venue.kind, v_venue.base_url_env, v_venue.key_file_env,
                        v_config ->> 'chain', v_name, v_coin,
                        registry_row((SELECT d.address FROM venue_deposit_addresses d
                                       WHERE d.venue_key = v_venue.venue_key AND d.chain_key = v_config ->> 'chain'
                                         AND d.coin = v_coin),
                                     format('%s: venue %s has no deposit address for %s on chain %s', v_what,
                                            v_venue.venue_key, quote_literal(left(v_coin, 80)), v_config ->> 'chain'),
                                     'The admin records it with upsert_venue_deposit_address.'),
                        trim_scale(v_amount)::text,
                        (SELECT floor(extract(epoch FROM min(i.created_at)) * 1000)::bigint - 86400000
                           FROM movement_plan_edges edge
                           JOIN node_intents i ON i.node_id = edge.parent_node_id
                          WHERE edge.child_node_id = p_node_id AND i.intent_state IN ('PREPARED', 'SUBMITTED'));
END
$$;
