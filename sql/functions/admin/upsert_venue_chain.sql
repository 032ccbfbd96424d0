-- upsert_venue_chain: the venue's name for one of our registered chains (the
-- "chain" parameter of its withdrawal and deposit calls; local-a -> the
-- double's name for it), or a new name for it. An admin step: SECURITY
-- INVOKER, no grant. QT014 the venue or the chain is not registered; QT002 a
-- malformed name, or one the venue already uses for another chain. Audited as
-- entity 'chain' when something changed.
CREATE OR REPLACE FUNCTION upsert_venue_chain(
    p_venue_key   text,
    p_chain_key   text,
    p_venue_chain text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous venue_chains;
BEGIN
    PERFORM registered_venue('upsert_venue_chain', p_venue_key);
    PERFORM registered_chain('upsert_venue_chain', p_chain_key);
    PERFORM check_registry_name(format('upsert_venue_chain: the name of %s at %s must be 1 to 64 letters, digits, _, . or -',
                                       p_chain_key, p_venue_key),
                                p_venue_chain, '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$',
                                'Give the venue''s own name for the chain (e.g. Bybit''s ETH, BASE, ARBI).');
    IF EXISTS (SELECT 1 FROM venue_chains
                WHERE venue_key = p_venue_key AND venue_chain = p_venue_chain AND chain_key <> p_chain_key) THEN
        RAISE EXCEPTION 'upsert_venue_chain: % already names another chain at %', p_venue_chain, p_venue_key
            USING ERRCODE = 'QT002', HINT = 'Each of our chains has its own name at a venue: check the name, or change that chain first.';
    END IF;

    SELECT * INTO v_previous FROM venue_chains WHERE venue_key = p_venue_key AND chain_key = p_chain_key FOR UPDATE;
    IF v_previous.venue_chain IS NOT DISTINCT FROM p_venue_chain THEN
        RETURN;
    END IF;
    INSERT INTO venue_chains (venue_key, chain_key, venue_chain, updated_at)
    VALUES (p_venue_key, p_chain_key, p_venue_chain, clock())
    ON CONFLICT (venue_key, chain_key) DO UPDATE
       SET venue_chain = excluded.venue_chain, updated_at = excluded.updated_at;
    PERFORM audit_registry(p_chain_key, 'venue_chain_set',
                           jsonb_strip_nulls(jsonb_build_object('venue', p_venue_key, 'venue_chain', p_venue_chain,
                                                                'previous_venue_chain', v_previous.venue_chain)));
END
$$;
