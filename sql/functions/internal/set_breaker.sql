-- set_breaker: CLOSED -> TRIPPED, the one place a breaker is tripped (a
-- scope paused): with the reason, audited as entity 'breaker' by p_actor;
-- p_expires_at, when given, ends it by itself; p_by_operator says an
-- operator paused it (its pauser may not resume it: reset_breaker). A
-- tripped breaker stays as it is (0 returned, nothing written), but for an
-- operator's pause the engine trips (p_by_operator false): the pause becomes
-- the engine's breaker, with no end and no reset asked, which two operators
-- reset (audited 'breaker_tripped', TRIPPED -> TRIPPED, with the pause it
-- replaced; 1 returned). Else one operator's timed pause, or one operator
-- resuming it, would end the breaker a failure or a drift alert tripped,
-- which trips it once. The engine tripping its own breaker again (a new
-- drift alert of a scope it stopped) withdraws a reset asked for before
-- (audited 'breaker_tripped', TRIPPED -> TRIPPED, with the request; 0
-- returned), so that the two who close it see this trip too, as an
-- operator's pause does (trip_breaker). One whose expires_at has passed is
-- replaced (audited 'breaker_expired' first).
-- From then on limit_holds holds that scope's READY nodes until it is reset
-- (reset_breaker) or expires. Called by trip_breakers (repeated failures),
-- verify_drift (a drift alert) and trip_breaker (an operator).
CREATE OR REPLACE FUNCTION set_breaker(
    p_scope       text,
    p_name        text,
    p_reason      text,
    p_actor       text,
    p_expires_at  timestamptz DEFAULT NULL,
    p_by_operator boolean DEFAULT false
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_expired breakers;
    v_held    breakers;
BEGIN
    DELETE FROM breakers b
     WHERE b.scope = p_scope AND b.name = p_name AND b.expires_at <= v_now
    RETURNING * INTO v_expired;
    IF FOUND THEN
        PERFORM write_audit(ARRAY[(p_actor, 'breaker', p_scope || ':' || p_name, NULL, 'breaker_expired',
                                   'TRIPPED', 'CLOSED',
                                   jsonb_build_object('expired_at', v_expired.expires_at,
                                                      'tripped_by', v_expired.tripped_by,
                                                      'reason', v_expired.reason))::qtg.audit_event]);
    END IF;
    INSERT INTO breakers (scope, name, tripped_at, tripped_by, reason, expires_at, by_operator)
    VALUES (p_scope, p_name, v_now, p_actor, p_reason, p_expires_at, p_by_operator)
    ON CONFLICT (scope, name) DO NOTHING;
    IF NOT FOUND THEN
        IF p_by_operator THEN
            RETURN 0;
        END IF;
        SELECT * INTO v_held FROM breakers b
         WHERE b.scope = p_scope AND b.name = p_name
           FOR UPDATE;
        IF NOT FOUND THEN
            RETURN 0;
        END IF;
        IF NOT v_held.by_operator THEN
            -- the engine's own, tripped again: a reset asked for before is withdrawn
            IF v_held.reset_requested_by IS NOT NULL THEN
                UPDATE breakers b SET reset_requested_by = NULL, reset_requested_at = NULL
                 WHERE b.scope = p_scope AND b.name = p_name;
                PERFORM write_audit(ARRAY[(p_actor, 'breaker', p_scope || ':' || p_name, NULL, 'breaker_tripped',
                                           'TRIPPED', 'TRIPPED',
                                           jsonb_build_object('reason', p_reason,
                                                              'withdrawn_reset_request_by', v_held.reset_requested_by)
                                          )::qtg.audit_event]);
            END IF;
            RETURN 0;
        END IF;
        -- the engine's trip outranks an operator's pause: it becomes the engine's
        UPDATE breakers b
           SET tripped_at = v_now, tripped_by = p_actor, reason = p_reason, expires_at = p_expires_at,
               by_operator = false, reset_requested_by = NULL, reset_requested_at = NULL
         WHERE b.scope = p_scope AND b.name = p_name;
        PERFORM write_audit(ARRAY[(p_actor, 'breaker', p_scope || ':' || p_name, NULL, 'breaker_tripped',
                                   'TRIPPED', 'TRIPPED',
                                   jsonb_build_object('reason', p_reason, 'expires_at', p_expires_at,
                                                      'replaces_pause_by', v_held.tripped_by,
                                                      'pause_reason', v_held.reason,
                                                      'pause_expires_at', v_held.expires_at))::qtg.audit_event]);
        RETURN 1;
    END IF;
    PERFORM write_audit(ARRAY[(p_actor, 'breaker', p_scope || ':' || p_name, NULL, 'breaker_tripped',
                               'CLOSED', 'TRIPPED',
                               jsonb_build_object('reason', p_reason, 'expires_at', p_expires_at))::qtg.audit_event]);
    RETURN 1;
END
$$;
