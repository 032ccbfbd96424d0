-- set_request_state: the one place a request changes state. Internal.
-- From-state: p_from (guarded). To-state: p_to. The caller holds the request lock.
-- Writes the audit event and enqueues the caller's callback in the same transaction.
CREATE OR REPLACE FUNCTION set_request_state(
    p_request_id bigint,
    p_from       qtg.request_state,
    p_to         qtg.request_state,
    p_actor      text,
    p_detail     jsonb DEFAULT '{}'
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_request movement_requests;
BEGIN
    UPDATE movement_requests
       SET request_state = p_to,
           approved_at   = CASE WHEN p_to = 'APPROVED' THEN v_now ELSE approved_at END,
           approved_by   = CASE WHEN p_to = 'APPROVED' THEN p_actor ELSE approved_by END,
           started_at    = CASE WHEN p_to = 'EXECUTING' THEN v_now ELSE started_at END,
           finished_at   = CASE WHEN p_to IN ('COMPLETED', 'FAILED', 'CANCELLED', 'EXPIRED') THEN v_now END,
           updated_at    = v_now
     WHERE id = p_request_id
       AND request_state = p_from
    RETURNING * INTO v_request;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'movement % is not in state %', p_request_id, p_from
            USING ERRCODE = 'QT020';
    END IF;

    PERFORM write_audit(p_actor, 'request', p_request_id::text, p_request_id, 'state_changed',
                        p_from::text, p_to::text, p_detail);
    PERFORM enqueue_callback(v_request, p_from, p_detail);
END
$$;
