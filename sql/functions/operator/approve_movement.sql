-- approve_movement: PENDING_APPROVAL -> APPROVED, by the login that calls it.
--
-- Four eyes: the approver is session_user, never a parameter, and must not be
-- the login that created the movement. Such an approval is refused and the
-- refusal is kept: an error would roll back its own audit row, so instead the
-- call writes an `approval_refused` audit row, raises a WARNING with SQLSTATE
-- QT022 and returns the unchanged state (PENDING_APPROVAL); the movement is
-- not touched. Clients treat that warning as a refusal (qtg_runner's procs
-- layer raises it as FourEyesRefused).
--
-- Idempotent for the approver: the login that approved the movement calling
-- again gets its state as it is now (APPROVED, EXECUTING, ...), nothing
-- written. Other refusals are errors that change nothing: an unknown movement
-- (QT010), one not PENDING_APPROVAL (approved by another login, or past it)
-- or already expired (QT020). Lock: the request.
CREATE OR REPLACE FUNCTION approve_movement(p_movement_id bigint)
RETURNS qtg.request_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_request movement_requests;
    v_actor   text := session_user;
BEGIN
    SELECT * INTO v_request FROM movement_requests WHERE id = p_movement_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'movement % does not exist', p_movement_id USING ERRCODE = 'QT010',
            HINT = 'Check the movement id and the network (schema) you are connected to.';
    END IF;
    -- idempotent for its approver: the same login approving again gets the state as it is
    IF v_request.request_state <> 'PENDING_APPROVAL' AND v_request.approved_by = v_actor THEN
        RETURN v_request.request_state;
    END IF;
    IF v_request.request_state <> 'PENDING_APPROVAL' THEN
        RAISE EXCEPTION 'movement % is %, only PENDING_APPROVAL can be approved', p_movement_id, v_request.request_state
            USING ERRCODE = 'QT020';
    END IF;
    IF v_request.expires_at IS NOT NULL AND v_request.expires_at <= clock() THEN
        RAISE EXCEPTION 'movement % expired at %', p_movement_id, v_request.expires_at USING ERRCODE = 'QT020',
            HINT = 'Create a new movement with a later expiry.';
    END IF;
    IF v_request.created_by = v_actor THEN
        PERFORM write_audit(ARRAY[(v_actor, 'request', p_movement_id::text, p_movement_id, 'approval_refused',
                                   'PENDING_APPROVAL', 'PENDING_APPROVAL',
                                   jsonb_build_object('reason', 'the creator cannot approve'))::qtg.audit_event]);
        RAISE WARNING 'movement % was created by %, who cannot also approve it; the refusal is recorded in the audit log',
                      p_movement_id, v_actor
            USING ERRCODE = 'QT022', HINT = 'A second operator, logged in as themselves, must approve.';
        RETURN v_request.request_state;
    END IF;

    PERFORM set_movement_states(ARRAY[p_movement_id], 'PENDING_APPROVAL', ARRAY['APPROVED'::qtg.request_state],
                                ARRAY[v_actor]);
    PERFORM notify_work('approved');
    RETURN 'APPROVED';
END
$$;
