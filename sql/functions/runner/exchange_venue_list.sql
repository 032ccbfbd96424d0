-- exchange_venue_list: the network's registered exchange venues (key, kind, the
-- NAMES of the environment variables of the base URL and the API key file),
-- for an exchange executor's health check. Reads only.
CREATE OR REPLACE FUNCTION exchange_venue_list()
RETURNS TABLE (venue_key text, kind text, base_url_env text, key_file_env text)
LANGUAGE sql STABLE
AS $$
    SELECT v.venue_key, v.kind, v.base_url_env, v.key_file_env FROM exchange_venues v ORDER BY v.venue_key
$$;
