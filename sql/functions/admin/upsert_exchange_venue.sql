-- upsert_exchange_venue: registers an exchange venue on this network, or
-- changes one. Neither its base URL nor its API key enters the database:
-- p_base_url_env names the environment variable that holds the URL where
-- runners run, p_key_file_env the one that holds the path of its API key file
-- (upper-case letters, digits and _). An admin step (`qtg world up` records
-- the local exchange through it): SECURITY INVOKER, no grant.
--   p_kind  bybit (the Bybit v5 API)
-- QT002 anything malformed. Audited as entity 'chain' (the registry) when
-- something changed; registering the same again changes nothing.
CREATE OR REPLACE FUNCTION upsert_exchange_venue(
    p_venue_key    text,
    p_kind         text,
    p_base_url_env text,
    p_key_file_env text
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous exchange_venues;
BEGIN
    PERFORM check_registry_name('upsert_exchange_venue: a venue key is a lower-case letter then up to 62 lower-case '
                                'letters, digits or -', p_venue_key, '^[a-z][a-z0-9-]{0,62}$',
                                'Name the venue as plans will, e.g. bybit.');
    PERFORM check_registry_name(format('upsert_exchange_venue: the kind of %s must be bybit', p_venue_key), p_kind,
                                '^bybit$', 'Name the API the venue speaks: bybit (Bybit v5).');
    IF p_base_url_env IS NULL OR p_base_url_env !~ '^[A-Z][A-Z0-9_]{0,127}$'
       OR p_key_file_env IS NULL OR p_key_file_env !~ '^[A-Z][A-Z0-9_]{0,127}$' THEN
        -- the values are not echoed: one may be the URL or the key itself
        RAISE EXCEPTION 'upsert_exchange_venue: the base URL and the key file of % must each be named by an environment variable (upper-case letters, digits and _)', p_venue_key
            USING ERRCODE = 'QT002',
                  HINT = 'Give the variables'' names, e.g. QTG_BYBIT_URL and QTG_BYBIT_KEY_FILE, and set them in the runners'' environment.';
    END IF;

    SELECT * INTO v_previous FROM exchange_venues WHERE venue_key = p_venue_key FOR UPDATE;
    IF v_previous.venue_key IS NOT NULL
       AND (v_previous.kind, v_previous.base_url_env, v_previous.key_file_env) = (p_kind, p_base_url_env, p_key_file_env) THEN
        RETURN;
    END IF;
    INSERT INTO exchange_venues (venue_key, kind, base_url_env, key_file_env, created_at, updated_at)
    VALUES (p_venue_key, p_kind, p_base_url_env, p_key_file_env, clock(), clock())
    ON CONFLICT (venue_key) DO UPDATE
       SET kind = excluded.kind, base_url_env = excluded.base_url_env,
           key_file_env = excluded.key_file_env, updated_at = excluded.updated_at;
    PERFORM audit_registry(p_venue_key, 'venue_set',
                           jsonb_strip_nulls(jsonb_build_object(
                               'kind', p_kind, 'base_url_env', p_base_url_env, 'key_file_env', p_key_file_env,
                               'previous_kind', v_previous.kind, 'previous_base_url_env', v_previous.base_url_env,
                               'previous_key_file_env', v_previous.key_file_env)));
END
$$;
