-- registered_venue: the exchange_venues row of p_venue_key, locked FOR UPDATE
-- (the admin procedures change what hangs off it under that lock); QT014 when
-- the network has no such venue.
CREATE OR REPLACE FUNCTION registered_venue(p_caller text, p_venue_key text) RETURNS exchange_venues
LANGUAGE plpgsql
AS $$
DECLARE
    v_venue exchange_venues;
BEGIN
    SELECT * INTO v_venue FROM exchange_venues WHERE venue_key = p_venue_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: venue % is not registered on this network', p_caller,
                        coalesce(quote_literal(left(p_venue_key, 80)), 'NULL')
            USING ERRCODE = 'QT014',
                  HINT = 'Register it first with upsert_exchange_venue (exchange_venues lists those that are).';
    END IF;
    RETURN v_venue;
END
$$;
