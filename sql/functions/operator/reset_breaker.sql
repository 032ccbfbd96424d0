-- reset_breaker: a tripped breaker (a paused scope) closes with four eyes.
-- Paused by an operator (trip_breaker): another operator resumes it at once
-- (audited, 'CLOSED'); the pauser asking is a four-eyes refusal. Tripped by
-- the engine (repeated failures, a drift alert): two different operators
-- ask: the first call records who asked (audited, 'RESET_REQUESTED'), a
-- second call by another login closes it (audited, 'CLOSED'). Either way the
-- scope's nodes are claimed again. A four-eyes refusal (the pauser, or the
-- same login asking twice) is an audited WARNING with SQLSTATE QT022, the
-- breaker unchanged. A pause past its expires_at is closed already: the
-- call records that ('breaker_expired') and answers CLOSED. QT061 when the
-- scope has no tripped breaker. Locks the breaker.
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
    IF v_breaker.expires_at IS NULL OR v_breaker.expires_at > v_now THEN
        -- four eyes: the operator who paused it, or who asked first, may not close it
        IF v_actor IN (CASE WHEN v_breaker.by_operator THEN v_breaker.tripped_by END, v_breaker.reset_requested_by) THEN
            PERFORM refuse_four_eyes('breaker', v_id, NULL, 'breaker_reset_refused', 'TRIPPED',
                                     jsonb_build_object('reason', CASE WHEN v_breaker.by_operator
                                                                       THEN 'the operator who paused it'
                                                                       ELSE 'the same operator asked twice' END),
                                     CASE WHEN v_breaker.by_operator
                                          THEN format('%s paused %s; another operator resumes it', v_actor, v_id)
                                          ELSE format('breaker %s was asked to reset by %s already; a second '
                                                      'operator must reset it', v_id, v_actor) END,
                                     'Another operator, logged in as themselves, calls reset_breaker.');
            RETURN CASE WHEN v_breaker.by_operator THEN 'TRIPPED' ELSE 'RESET_REQUESTED' END;
        END IF;
        IF v_breaker.reset_requested_by IS NULL AND NOT v_breaker.by_operator THEN
            UPDATE breakers SET reset_requested_by = v_actor, reset_requested_at = v_now
             WHERE scope = p_scope AND name = p_name;
            PERFORM write_audit(ARRAY[(v_actor, 'breaker', v_id, NULL, 'breaker_reset_requested', 'TRIPPED',
                                       'TRIPPED', '{}'::jsonb)::qtg.audit_event]);
            RETURN 'RESET_REQUESTED';
        END IF;
    END IF;
    DELETE FROM breakers WHERE scope = p_scope AND name = p_name;
    PERFORM write_audit(ARRAY[(v_actor, 'breaker', v_id, NULL,
                               CASE WHEN v_breaker.expires_at <= v_now THEN 'breaker_expired' ELSE 'breaker_reset' END,
                               'TRIPPED', 'CLOSED',
                               jsonb_build_object('requested_by', v_breaker.reset_requested_by,
                                                  'tripped_at', v_breaker.tripped_at,
                                                  'tripped_by', v_breaker.tripped_by,
                                                  'expires_at', v_breaker.expires_at,
                                                  'reason', v_breaker.reason))::qtg.audit_event]);
    PERFORM notify_work('ready');
    RETURN 'CLOSED';
END
$$;
