-- trip_breaker: CLOSED -> TRIPPED: an operator stops a lane or a venue (an
-- executor with a side effect) at once: from then on limit_holds holds the
-- scope's READY nodes, as when failures or a drift alert trip it. One operator
-- suffices (anyone may pull the brake); closing it again takes two
-- (reset_breaker). The tripper is the session's login, with a reason.
-- Returns TRIPPED and whether this call tripped it. A breaker tripped already
-- stays tripped as it was (tripped = false): the call's reason is kept in the
-- audit log ('breaker_tripped', TRIPPED -> TRIPPED), and a reset one operator
-- asked for is withdrawn, so that the two who close it see this pull.
-- Refused (nothing changes): QT002 no reason, a scope that is not lane or
-- venue, a name that is no lane of the network (a row of lane_baselines, or
-- an executor's key: the lane of its nodes that name none) or no venue (an
-- executor with a side effect: limit_holds holds only those nodes); QT005 a
-- text beyond engine_limits. Lock: the breaker.
CREATE OR REPLACE FUNCTION trip_breaker(p_scope text, p_name text, p_reason text)
RETURNS TABLE (breaker_state text, tripped boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_actor     text := session_user;
    v_requested text;
BEGIN
    PERFORM check_reason('trip_breaker', p_reason, 'Say why the scope must stop: the reason is kept in the audit log.',
                         p_text => ARRAY[p_scope, p_name, p_reason]);
    IF p_scope IS NULL OR p_scope NOT IN ('lane', 'venue') THEN
        RAISE EXCEPTION 'trip_breaker: scope must be lane or venue, got %', coalesce(quote_literal(p_scope), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'Name lane and a lane, or venue and an executor''s key: trip_breaker(''venue'', ''ccip'', ''why'').';
    END IF;
    IF p_scope = 'lane' AND NOT EXISTS (SELECT 1 FROM lane_baselines b WHERE b.lane = p_name)
                        AND NOT EXISTS (SELECT 1 FROM executors e WHERE e.executor_key = p_name) THEN
        RAISE EXCEPTION 'trip_breaker: % is no lane of this network', coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'lane_baselines lists the lanes; a node whose config names none runs in its executor''s (executors).';
    END IF;
    IF p_scope = 'venue' AND NOT EXISTS (SELECT 1 FROM executors e WHERE e.executor_key = p_name AND e.has_side_effect) THEN
        RAISE EXCEPTION 'trip_breaker: % is no venue of this network', coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'A venue is an executor with a side effect: SELECT executor_key FROM executors WHERE has_side_effect.';
    END IF;
    LOOP
        IF set_breaker(p_scope, p_name, p_reason, v_actor) = 1 THEN
            RETURN QUERY SELECT 'TRIPPED'::text, true;
            RETURN;
        END IF;
        -- tripped already (unless a reset closed it since: then trip it again)
        SELECT b.reset_requested_by INTO v_requested
          FROM breakers b WHERE b.scope = p_scope AND b.name = p_name FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
    UPDATE breakers b SET reset_requested_by = NULL, reset_requested_at = NULL
     WHERE b.scope = p_scope AND b.name = p_name AND b.reset_requested_by IS NOT NULL;
    PERFORM write_audit(ARRAY[(v_actor, 'breaker', p_scope || ':' || p_name, NULL, 'breaker_tripped',
                               'TRIPPED', 'TRIPPED',
                               jsonb_build_object('reason', p_reason, 'withdrawn_reset_request_by', v_requested))::qtg.audit_event]);
    RETURN QUERY SELECT 'TRIPPED'::text, false;
END
$$;
