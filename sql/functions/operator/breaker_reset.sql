-- breaker_reset: reset_breaker as a procedure, for CALL in psql: a paused
-- scope resumed by another operator than its pauser (CLOSED); a breaker the
-- engine tripped, TRIPPED -> RESET_REQUESTED (a first operator asks) ->
-- CLOSED (a second one resets).
--   CALL breaker_reset('venue', 'bybit_withdraw');
-- Answers the breaker's state in the INOUT parameter breaker_state: the
-- pauser, or the same login asking twice, is reset_breaker's QT022 WARNING
-- (audited) and answers the state unchanged. The rules, the refusals and the
-- writes are reset_breaker's.
CREATE OR REPLACE PROCEDURE breaker_reset(
    p_scope text,
    p_name  text,
    INOUT breaker_state text DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT reset_breaker(p_scope, p_name);
$$;
