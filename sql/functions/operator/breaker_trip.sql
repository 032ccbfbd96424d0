-- breaker_trip: trip_breaker as a procedure, for CALL in psql: CLOSED ->
-- TRIPPED, a lane or a venue stopped by one operator, with a reason.
--   CALL breaker_trip('venue', 'bybit_withdraw', 'the exchange paused withdrawals');
-- Answers trip_breaker's row in the INOUT parameters: the breaker's state
-- (TRIPPED) and whether this call tripped it (false: it was tripped already;
-- a reset asked for is withdrawn). The rules, the refusals and the writes are
-- trip_breaker's.
CREATE OR REPLACE PROCEDURE breaker_trip(
    p_scope  text,
    p_name   text,
    p_reason text,
    INOUT breaker_state text DEFAULT NULL,
    INOUT tripped       boolean DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT t.breaker_state, t.tripped FROM trip_breaker(p_scope, p_name, p_reason) t;
$$;
