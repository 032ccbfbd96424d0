-- write_audit: appends one event to audit_outbox. Internal: called by the
-- transition procedures in the transaction that makes the change.
CREATE OR REPLACE FUNCTION write_audit(
    p_actor      text,
    p_entity     text,
    p_entity_id  text,
    p_request_id bigint,
    p_action     text,
    p_from_state text,
    p_to_state   text,
    p_detail     jsonb DEFAULT '{}'
) RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
    VALUES (clock(), coalesce(p_actor, session_user), p_entity, p_entity_id, p_request_id, p_action,
            p_from_state, p_to_state, coalesce(p_detail, '{}'));
$$;
