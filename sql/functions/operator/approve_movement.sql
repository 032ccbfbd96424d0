-- approve_movement: PENDING_APPROVAL -> APPROVED.
-- Four eyes: the approver must not be the creator (QT022). An expired movement
-- cannot be approved (QT020). The approver is the session's login unless
-- p_actor names one. Lock: the request.
CREATE OR REPLACE FUNCTION approve_movement(p_movement_id bigint, p_actor text DEFAULT NULL)
RETURNS qtg.request_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_request movement_requests;
    v_actor   text := coalesce(p_actor, session_user);
BEGIN
    IF btrim(v_actor) = '' THEN
        RAISE EXCEPTION 'approve_movement needs the approver''s name' USING ERRCODE = 'QT002';
    END IF;
    SELECT * INTO v_request FROM movement_requests WHERE id = p_movement_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'movement % does not exist', p_movement_id USING ERRCODE = 'QT010',
            HINT = 'Check the movement id and the network (schema) you are connected to.';
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
        RAISE EXCEPTION 'movement % was created by %, who cannot also approve it', p_movement_id, v_actor
            USING ERRCODE = 'QT022', HINT = 'A second operator must approve.';
    END IF;

    PERFORM set_movement_states(ARRAY[p_movement_id], 'PENDING_APPROVAL', ARRAY['APPROVED'::qtg.request_state],
                                ARRAY[v_actor]);
    PERFORM notify_work('approved');
    RETURN 'APPROVED';
END
$$;
