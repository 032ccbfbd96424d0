-- registry_row: p_row, a row (or value) a route function read from the chain
-- registry (chains, chain_tokens, exchange_venues, venue_chains), or QT014
-- p_missing (HINT p_hint) when the read found none (p_row NULL). The one
-- refusal of route_chain, route_token, route_venue and route_venue_chain,
-- and of the bybit routes' reads of a coin's token and a deposit address.
-- Internal; reads nothing itself.
CREATE OR REPLACE FUNCTION registry_row(p_row anyelement, p_missing text, p_hint text) RETURNS anyelement
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_row IS NULL THEN
        RAISE EXCEPTION '%', p_missing USING ERRCODE = 'QT014', HINT = p_hint;
    END IF;
    RETURN p_row;
END
$$;
