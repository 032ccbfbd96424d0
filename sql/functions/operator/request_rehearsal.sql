-- request_rehearsal: a rehearsal of a movement asked for, to be served by an
-- operator's rehearsal service (`qtg rehearse --requested`): the operator
-- page's and the HTTP API's way to rehearse, since neither can run one.
-- Movement PENDING_APPROVAL -> PENDING_APPROVAL, a row of rehearsal_requests
-- (who asked, the clock), an audit row (rehearsal_requested, with the
-- request's id) and a NOTIFY on qtg_<network>_rehearsals (payload: the
-- request's id) that wakes a waiting service early; a service polls too, so
-- a lost notification only delays the request. Any operator may ask, the
-- movement's creator too (a rehearsal moves nothing; record_rehearsal).
-- Idempotent: while the movement has an open (unfinished) request, asking
-- again answers that request's id and writes nothing, whoever asks.
-- Refused, and nothing changes: QT010 an unknown movement; QT020 a movement
-- that is not PENDING_APPROVAL (its approval is decided: too late to
-- rehearse it). Locks: the movement (FOR SHARE, as record_rehearsal: an
-- approval waits for the request to commit), then the request's row (the
-- open-request index serialises two asking at once: the second answers the
-- first's request).
-- Returns the request's id.
CREATE OR REPLACE FUNCTION request_rehearsal(p_movement_id bigint) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM lock_rehearsable(p_movement_id, 'asked for');

    SELECT q.id INTO v_id FROM rehearsal_requests q WHERE q.movement_id = p_movement_id AND q.finished_at IS NULL;
    IF FOUND THEN
        RETURN v_id;  -- asked already, not served yet: that request
    END IF;
    INSERT INTO rehearsal_requests (movement_id, requested_by, requested_at)
    VALUES (p_movement_id, session_user, clock())
    ON CONFLICT (movement_id) WHERE finished_at IS NULL DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN  -- another login asked at the same moment, and committed first
        SELECT q.id INTO STRICT v_id FROM rehearsal_requests q
         WHERE q.movement_id = p_movement_id AND q.finished_at IS NULL;
        RETURN v_id;
    END IF;
    PERFORM write_audit(ARRAY[(session_user, 'request', p_movement_id::text, p_movement_id, 'rehearsal_requested',
                               'PENDING_APPROVAL', 'PENDING_APPROVAL',
                               jsonb_build_object('request_id', v_id))::qtg.audit_event]);
    PERFORM pg_notify('qtg_' || current_schema() || '_rehearsals', v_id::text);
    RETURN v_id;
END
$$;
