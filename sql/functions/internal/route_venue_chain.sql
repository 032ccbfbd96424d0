-- route_venue_chain: venue p_venue_key's name for chain p_chain_key (the
-- exchange's "chain" parameter: venue_chains), as a route function reads it.
-- QT014 when the admin has not named it (registry_row), the message p_what
-- (the route and the node), the venue, then the chain as p_chain_shown
-- spells it. Internal. Reads only; takes no lock.
CREATE OR REPLACE FUNCTION route_venue_chain(p_what text, p_venue_key text, p_chain_key text, p_chain_shown text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT registry_row((SELECT vc.venue_chain FROM venue_chains vc
                          WHERE vc.venue_key = p_venue_key AND vc.chain_key = p_chain_key),
                        format('%s: venue %s has no name for chain %s', p_what, coalesce(p_venue_key, '<NULL>'),
                               coalesce(p_chain_shown, '<NULL>')),
                        'The admin names the chain at the venue with upsert_venue_chain.');
$$;
