-- recheck_expiry: decides a due expiry for one request. Internal; the caller
-- holds the request lock. Used by expire_movements, and again whenever a node
-- goes back to READY (a retryable submit failure, or recovery proving nothing
-- went out), so an expiry waived for a side effect that turned out never to
-- have happened is not left waived while new work would be dispatched.
--
--   not due, terminal, or already stopping   nothing (returns false)
--   a side-effect node has left READY       expiry waived (expiry_waived_at,
--                                           audited); the movement runs on
--   otherwise                               stop_movement(EXPIRED): PENDING and
--                                           READY nodes SKIPPED (returns true)
-- Locks: the request (held by the caller), then its nodes.
CREATE OR REPLACE FUNCTION recheck_expiry(p_request_id bigint, p_actor text) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_request movement_requests;
    v_started boolean;
BEGIN
    SELECT * INTO STRICT v_request FROM movement_requests WHERE id = p_request_id;
    IF v_request.expires_at IS NULL OR v_request.expires_at > v_now OR v_request.stop_reason IS NOT NULL
       OR v_request.request_state NOT IN ('PENDING_APPROVAL', 'APPROVED', 'EXECUTING') THEN
        RETURN false;
    END IF;

    PERFORM 1 FROM movement_request_nodes WHERE request_id = p_request_id ORDER BY id FOR UPDATE;
    SELECT EXISTS (
        SELECT 1 FROM movement_request_nodes
         WHERE request_id = p_request_id
           AND has_side_effect
           AND node_state NOT IN ('PENDING', 'READY', 'SKIPPED')
    ) INTO v_started;

    IF v_started THEN
        IF v_request.expiry_waived_at IS NULL THEN
            UPDATE movement_requests SET expiry_waived_at = v_now, updated_at = v_now WHERE id = p_request_id;
            PERFORM write_audit(ARRAY[(p_actor, 'request', p_request_id::text, p_request_id, 'expiry_waived',
                                       v_request.request_state::text, v_request.request_state::text,
                                       jsonb_build_object('expires_at', v_request.expires_at,
                                                          'reason', 'a side effect has started; the movement runs to the end')
                                      )::qtg.audit_event]);
        END IF;
        RETURN false;
    END IF;

    PERFORM stop_movement(p_request_id, 'EXPIRED', p_actor, format('expired at %s', v_request.expires_at));
    RETURN true;
END
$$;
