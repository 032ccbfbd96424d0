-- set_breaker: CLOSED -> TRIPPED, the one place a breaker of a lane or venue
-- (an executor) is tripped: with the reason, audited as entity 'breaker' by
-- p_actor. A tripped breaker stays as it is (0 returned, nothing written).
-- From then on limit_holds holds that scope's READY nodes until two operators
-- reset it (reset_breaker). Called by trip_breakers (repeated failures),
-- verify_drift (a drift alert) and trip_breaker (an operator).
CREATE OR REPLACE FUNCTION set_breaker(p_scope text, p_name text, p_reason text, p_actor text) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock();
BEGIN
    INSERT INTO breakers (scope, name, tripped_at, tripped_by, reason)
    VALUES (p_scope, p_name, v_now, p_actor, p_reason)
    ON CONFLICT (scope, name) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    PERFORM write_audit(ARRAY[(p_actor, 'breaker', p_scope || ':' || p_name, NULL, 'breaker_tripped',
                               'CLOSED', 'TRIPPED', jsonb_build_object('reason', p_reason))::qtg.audit_event]);
    RETURN 1;
END
$$;
