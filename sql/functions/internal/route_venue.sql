-- route_venue: the exchange_venues row of p_venue_key, as a route function
-- reads it (no lock: a route reads only). QT014 when the network has no such
-- venue (registry_row), the message p_what (the route and the node) then the
-- key as given, at most 80 characters of it. Internal. Reads only; takes no
-- lock.
CREATE OR REPLACE FUNCTION route_venue(p_what text, p_venue_key text) RETURNS exchange_venues
LANGUAGE sql STABLE
AS $$
    SELECT registry_row((SELECT v FROM exchange_venues v WHERE v.venue_key = p_venue_key),
                        format('%s: venue %s is not registered on this network', p_what,
                               coalesce(quote_literal(left(p_venue_key, 80)), '<NULL>')),
                        'The exchange_venues table lists the registered venues.');
$$;
