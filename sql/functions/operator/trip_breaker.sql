-- trip_breaker: CLOSED -> TRIPPED: an operator pauses a scope at once: from
-- then on limit_holds holds the scope's READY nodes (no new claim), as when
-- failures or a drift alert trip it; what is in flight is still observed and
-- recovered. The scopes: movement (name: its id), lane, venue (an executor
-- with a side effect: its key), chain (the nodes whose config names it) and
-- network (name '*'). One operator suffices (anyone may pull the brake);
-- another resumes it (reset_breaker: the pauser may not). With
-- p_for_seconds (1 to 30 days) the pause ends by itself then. The pauser is
-- the session's login, with a reason.
-- Returns TRIPPED and whether this call tripped it. A breaker tripped already
-- stays tripped as it was (tripped = false): the call's reason is kept in the
-- audit log ('breaker_tripped', TRIPPED -> TRIPPED), and a reset one operator
-- asked for is withdrawn, so that the two who close it see this pull.
-- Refused (nothing changes): QT002 no reason, a scope not in the list, a
-- name that is no lane of the network (a row of lane_baselines, or an
-- executor's key: the lane of its nodes that name none), no venue (an
-- executor with a side effect), no registered chain, not '*' for the
-- network, or p_for_seconds outside 1..2592000; QT010 no such movement;
-- QT021 a movement that has finished; QT005 a text beyond engine_limits.
-- Locks: the movement (its scope), then the breaker.
CREATE OR REPLACE FUNCTION trip_breaker(p_scope text, p_name text, p_reason text,
                                        p_for_seconds numeric DEFAULT NULL)
RETURNS TABLE (breaker_state text, tripped boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_actor     text := session_user;
    v_requested text;
    v_state     qtg.request_state;
BEGIN
    PERFORM check_reason('trip_breaker', p_reason, 'Say why the scope must stop: the reason is kept in the audit log.',
                         p_text => ARRAY[p_scope, p_name, p_reason]);
    IF p_scope IS NULL OR p_scope NOT IN ('movement', 'lane', 'venue', 'chain', 'network') THEN
        RAISE EXCEPTION 'trip_breaker: scope must be movement, lane, venue, chain or network, got %',
                        coalesce(quote_literal(p_scope), 'NULL')
            USING ERRCODE = 'QT002',
                  HINT = 'Name a scope and its name: trip_breaker(''lane'', ''cctp-fast'', ''why''), (''network'', ''*'', ''why'').';
    END IF;
    IF p_for_seconds IS NOT NULL AND (p_for_seconds = 'NaN' OR p_for_seconds < 1 OR p_for_seconds > 2592000) THEN
        RAISE EXCEPTION 'trip_breaker: a pause lasts from 1 second to 30 days, got %', p_for_seconds
            USING ERRCODE = 'QT002', HINT = 'Give p_for_seconds from 1 to 2592000, or NULL: until an operator resumes it.';
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
    IF p_scope = 'chain' AND NOT EXISTS (SELECT 1 FROM chains c WHERE c.chain_key = p_name) THEN
        RAISE EXCEPTION 'trip_breaker: % is no chain of this network', coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'SELECT chain_key FROM chains lists the registered chains.';
    END IF;
    IF p_scope = 'network' AND p_name IS DISTINCT FROM '*' THEN
        RAISE EXCEPTION 'trip_breaker: the network''s scope is named *, got %', coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Pause the whole network with trip_breaker(''network'', ''*'', ''why'').';
    END IF;
    IF p_scope = 'movement' THEN
        IF p_name !~ '^[0-9]{1,18}$' THEN
            RAISE EXCEPTION 'trip_breaker: % is not a movement id', coalesce(quote_literal(p_name), 'NULL')
                USING ERRCODE = 'QT002', HINT = 'Name the movement by its id, e.g. trip_breaker(''movement'', ''42'', ''why'').';
        END IF;
        SELECT r.request_state INTO v_state FROM movement_requests r WHERE r.id = p_name::bigint FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'trip_breaker: movement % does not exist', p_name USING ERRCODE = 'QT010',
                HINT = 'Check the movement id and the network (schema) you are connected to.';
        END IF;
        IF v_state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'EXPIRED') THEN
            RAISE EXCEPTION 'trip_breaker: movement % is %: a finished movement has nothing to pause', p_name, v_state
                USING ERRCODE = 'QT021', HINT = 'Pause a movement that has not finished.';
        END IF;
    END IF;
    LOOP
        IF set_breaker(p_scope, p_name, p_reason, v_actor,
                       clock() + make_interval(secs => p_for_seconds::double precision), true) = 1 THEN
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
