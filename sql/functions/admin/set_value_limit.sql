-- set_value_limit: the value limits of a scope, and when its breaker trips. An
-- admin step (SECURITY INVOKER, no grant): limits protect money, so no network
-- role sets them.
--   p_scope, p_name         'lane' and a lane, 'venue' and an executor key
--                           (cctp_burn, ccip, bybit_withdraw, ...), or
--                           'network' and '*'
--   p_max_in_flight         USDC its side-effect nodes may have in flight at once
--   p_max_per_day           USDC they may start in a UTC day
--   p_max_per_movement      the largest movement amount it runs
--   p_trip_after_failures   trip its breaker after this many FAILED nodes within
--   p_trip_window_seconds   this window (not for the network scope)
-- NULL: no such limit; all NULL removes the scope's row. QT002 for a scope or
-- name that is not one, QT005 for a number out of range (positive, below
-- 10^15 USDC; failures 1 to 100000; a window up to 30 days). Audited as
-- entity 'limit' when something changed. Takes effect at the next claim.
CREATE OR REPLACE FUNCTION set_value_limit(
    p_scope               text,
    p_name                text,
    p_max_in_flight       numeric,
    p_max_per_day         numeric,
    p_max_per_movement    numeric,
    p_trip_after_failures integer DEFAULT NULL,
    p_trip_window_seconds numeric DEFAULT 3600
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_previous value_limits;
    v_now      timestamptz := clock();
BEGIN
    IF p_scope IS NULL OR p_scope NOT IN ('lane', 'venue', 'network') THEN
        RAISE EXCEPTION 'set_value_limit: scope must be lane, venue or network, got %', coalesce(quote_literal(left(p_scope, 40)), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'A lane''s name, an executor key as the venue, or the network as ''*''.';
    END IF;
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_.*-]{1,64}$' OR (p_scope = 'network') <> (p_name = '*') THEN
        RAISE EXCEPTION 'set_value_limit: % is not a name of the % scope', coalesce(quote_literal(left(p_name, 80)), 'NULL'), p_scope
            USING ERRCODE = 'QT002', HINT = 'Name a lane or an executor key; the network scope is named ''*''.';
    END IF;
    IF p_scope = 'network' AND p_trip_after_failures IS NOT NULL THEN
        RAISE EXCEPTION 'set_value_limit: breakers trip per lane or venue, not for the network'
            USING ERRCODE = 'QT002', HINT = 'Give the failures to a lane''s or a venue''s limit.';
    END IF;
    PERFORM check_number('set_value_limit', 'max_in_flight (USDC)', p_max_in_flight, 0, 1e15, true, true);
    PERFORM check_number('set_value_limit', 'max_per_day (USDC)', p_max_per_day, 0, 1e15, true, true);
    PERFORM check_number('set_value_limit', 'max_per_movement (USDC)', p_max_per_movement, 0, 1e15, true, true);
    PERFORM check_number('set_value_limit', 'trip_after_failures', p_trip_after_failures, 1, 100000);
    PERFORM check_number('set_value_limit', 'trip_window_seconds', coalesce(p_trip_window_seconds, 3600), 0, 2592000, true);

    SELECT * INTO v_previous FROM value_limits WHERE scope = p_scope AND name = p_name FOR UPDATE;
    IF p_max_in_flight IS NULL AND p_max_per_day IS NULL AND p_max_per_movement IS NULL
       AND p_trip_after_failures IS NULL THEN
        IF v_previous.scope IS NULL THEN
            RETURN;
        END IF;
        DELETE FROM value_limits WHERE scope = p_scope AND name = p_name;
    ELSIF v_previous.scope IS NOT NULL
          AND (v_previous.max_in_flight, v_previous.max_per_day, v_previous.max_per_movement,
               v_previous.trip_after_failures, v_previous.trip_window_seconds)
              IS NOT DISTINCT FROM (p_max_in_flight, p_max_per_day, p_max_per_movement,
                                    p_trip_after_failures, coalesce(p_trip_window_seconds, 3600)) THEN
        RETURN;
    ELSE
        INSERT INTO value_limits (scope, name, max_in_flight, max_per_day, max_per_movement,
                                  trip_after_failures, trip_window_seconds, updated_by, updated_at)
        VALUES (p_scope, p_name, p_max_in_flight, p_max_per_day, p_max_per_movement,
                p_trip_after_failures, coalesce(p_trip_window_seconds, 3600), session_user, v_now)
        ON CONFLICT (scope, name) DO UPDATE
           SET max_in_flight = excluded.max_in_flight, max_per_day = excluded.max_per_day,
               max_per_movement = excluded.max_per_movement,
               trip_after_failures = excluded.trip_after_failures,
               trip_window_seconds = excluded.trip_window_seconds,
               updated_by = excluded.updated_by, updated_at = excluded.updated_at;
    END IF;
    PERFORM write_audit(ARRAY[(NULL, 'limit', p_scope || ':' || p_name, NULL, 'limit_set', NULL, NULL,
                               jsonb_build_object(
                                   'max_in_flight', p_max_in_flight, 'max_per_day', p_max_per_day,
                                   'max_per_movement', p_max_per_movement,
                                   'trip_after_failures', p_trip_after_failures,
                                   'trip_window_seconds', p_trip_window_seconds,
                                   'previous', CASE WHEN v_previous.scope IS NULL THEN NULL
                                                    ELSE to_jsonb(v_previous) - 'scope' - 'name' END))::qtg.audit_event]);
END
$$;
