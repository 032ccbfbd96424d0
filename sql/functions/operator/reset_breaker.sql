-- reset_breaker: a tripped breaker of a lane or venue closes only when two
-- different operators ask: the first call records who asked (audited,
-- 'RESET_REQUESTED'); a second call by another login closes it (audited,
-- 'CLOSED'): the scope's nodes are claimed again. The same login asking twice
-- is a four-eyes refusal: an audited WARNING with SQLSTATE QT022, the breaker
-- unchanged. QT061 when the scope has no tripped breaker. Locks the breaker.
CREATE OR REPLACE FUNCTION reset_breaker(p_scope text, p_name text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_breaker breakers;
    v_actor   text := session_user;
    v_now     timestamptz := clock();
    v_id      text := coalesce(p_scope, 'NULL') || ':' || coalesce(p_name, 'NULL');
BEGIN
    PERFORM check_limits('reset_breaker', p_text => ARRAY[p_scope, p_name]);
    SELECT * INTO v_breaker FROM breakers WHERE scope = p_scope AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reset_breaker: no breaker of % % is tripped', coalesce(p_scope, 'NULL'), coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'QT061', HINT = 'The breakers table (and value_limit_status) lists the tripped ones.';
    END IF;
    IF v_breaker.reset_requested_by IS NULL THEN
        UPDATE breakers SET reset_requested_by = v_actor, reset_requested_at = v_now
         WHERE scope = p_scope AND name = p_name;
        PERFORM write_audit(ARRAY[(v_actor, 'breaker', v_id, NULL, 'breaker_reset_requested', 'TRIPPED', 'TRIPPED',
                                   '{}'::jsonb)::qtg.audit_event]);
        RETURN 'RESET_REQUESTED';
    END IF;
    IF v_breaker.reset_requested_by = v_actor THEN
        PERFORM refuse_four_eyes('breaker', v_id, NULL, 'breaker_reset_refused', 'TRIPPED',
                                 jsonb_build_object('reason', 'the same operator asked twice'),
                                 format('breaker %s was asked to reset by %s already; a second operator must reset it',
                                        v_id, v_actor),
                                 'Another operator, logged in as themselves, calls reset_breaker.');
        RETURN 'RESET_REQUESTED';
    END IF;
    DELETE FROM breakers WHERE scope = p_scope AND name = p_name;
    PERFORM write_audit(ARRAY[(v_actor, 'breaker', v_id, NULL, 'breaker_reset', 'TRIPPED', 'CLOSED',
                               jsonb_build_object('requested_by', v_breaker.reset_requested_by,
                                                  'tripped_at', v_breaker.tripped_at,
                                                  'reason', v_breaker.reason))::qtg.audit_event]);
    PERFORM notify_work('ready');
    RETURN 'CLOSED';
END
$$;
