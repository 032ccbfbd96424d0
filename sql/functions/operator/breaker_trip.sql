-- breaker_trip: trip_breaker as a procedure, for CALL in psql: CLOSED ->
-- TRIPPED, a scope (movement, lane, venue, chain, the network '*') paused by
-- one operator, with a reason, for p_for_seconds or until resumed.
--   CALL breaker_trip('venue', 'bybit_withdraw', 'the exchange paused withdrawals');
--   CALL breaker_trip('chain', 'base', 'the sequencer is down', 3600);
-- Answers trip_breaker's row in the INOUT parameters: the breaker's state
-- (TRIPPED) and whether this call tripped it (false: it was tripped already;
-- a reset asked for is withdrawn). The rules, the refusals and the writes are
-- trip_breaker's.
CREATE OR REPLACE PROCEDURE breaker_trip(
    p_scope  text,
    p_name   text,
    p_reason text,
    p_for_seconds numeric DEFAULT NULL,
    INOUT breaker_state text DEFAULT NULL,
    INOUT tripped       boolean DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT t.breaker_state, t.tripped FROM trip_breaker(p_scope, p_name, p_reason, p_for_seconds) t;
$$;
