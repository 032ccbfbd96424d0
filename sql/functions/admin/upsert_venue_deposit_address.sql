-- upsert_venue_deposit_address: the venue's deposit address for a coin on one
-- of our chains (the chain named at the venue first: upsert_venue_chain), or
-- a new one. Registering it also allow-lists it on its chain
-- (allow_destination, label 'deposit <venue> <coin>'), which is how a
-- transfer into the exchange passes evm_transfer_route's recipient check; a
-- replaced address stays allow-listed until disallow_destination takes it
-- off. Transfers that landed in the address before it was registered
-- (evm_transfer nodes COMPLETED into it) are followed from now
-- (follow_capital_transfers), as the ones that land later are. An admin step:
-- SECURITY INVOKER, no grant. QT014 the venue, the chain or the venue's name
-- for the chain is not registered; QT002 a malformed coin or address. Audited
-- as entity 'chain' when something changed.
CREATE OR REPLACE FUNCTION upsert_venue_deposit_address(
    p_venue_key text,
    p_chain_key text,
    p_coin      text,
    p_address   text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_address  text;
    v_previous venue_deposit_addresses;
BEGIN
    PERFORM registered_venue('upsert_venue_deposit_address', p_venue_key);
    PERFORM registered_chain('upsert_venue_deposit_address', p_chain_key);
    IF NOT EXISTS (SELECT 1 FROM venue_chains WHERE venue_key = p_venue_key AND chain_key = p_chain_key) THEN
        RAISE EXCEPTION 'upsert_venue_deposit_address: % has no name for chain % at %', p_venue_key, p_chain_key, p_venue_key
            USING ERRCODE = 'QT014', HINT = 'Name the chain at the venue first with upsert_venue_chain.';
    END IF;
    PERFORM check_registry_name('upsert_venue_deposit_address: a coin is 1 to 16 letters, digits or dots', p_coin,
                                '^[A-Za-z0-9.]{1,16}$', 'Use the coin''s ticker as the venue names it, e.g. USDC.');
    v_address := evm_address('upsert_venue_deposit_address: address', p_address);

    SELECT * INTO v_previous FROM venue_deposit_addresses
     WHERE venue_key = p_venue_key AND chain_key = p_chain_key AND coin = p_coin FOR UPDATE;
    PERFORM allow_destination(p_chain_key, v_address, format('deposit %s %s', p_venue_key, p_coin));
    IF v_previous.address IS NOT DISTINCT FROM v_address THEN
        RETURN;
    END IF;
    INSERT INTO venue_deposit_addresses (venue_key, chain_key, coin, address, updated_at)
    VALUES (p_venue_key, p_chain_key, p_coin, v_address, clock())
    ON CONFLICT (venue_key, chain_key, coin) DO UPDATE
       SET address = excluded.address, updated_at = excluded.updated_at;
    PERFORM follow_capital_transfers(ARRAY(
        SELECT n.id FROM movement_request_nodes n
         WHERE n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED'   -- movement_request_nodes_transfer_to_idx
           AND (n.node_config ->> 'chain') = p_chain_key AND lower(n.node_config ->> 'to') = v_address));
    PERFORM audit_registry(p_chain_key, 'venue_deposit_address_set',
                           jsonb_strip_nulls(jsonb_build_object('venue', p_venue_key, 'coin', p_coin, 'address', v_address,
                                                                'previous_address', v_previous.address)));
END
$$;
