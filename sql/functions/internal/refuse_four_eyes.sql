-- refuse_four_eyes: the four-eyes refusal of an operator's second step taken
-- by the login that took the first (approve_proposal, requeue_node,
-- acknowledge_drift_alert, reset_breaker): audited first, as p_action on
-- p_entity p_entity_id (of movement p_request_id, if any), actor the
-- session's login, in state p_state before and after (nothing else
-- changes), with p_detail; then a WARNING with SQLSTATE QT022, p_warning and
-- p_hint, not an error, so that the audit row is kept. The caller returns
-- its state unchanged. Internal.
CREATE OR REPLACE FUNCTION refuse_four_eyes(
    p_entity     text,
    p_entity_id  text,
    p_request_id bigint,
    p_action     text,
    p_state      text,
    p_detail     jsonb,
    p_warning    text,
    p_hint       text
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM write_audit(ARRAY[(session_user, p_entity, p_entity_id, p_request_id, p_action, p_state, p_state,
                               p_detail)::qtg.audit_event]);
    RAISE WARNING '%', p_warning USING ERRCODE = 'QT022', HINT = p_hint;
END
$$;
