-- cancel_movement: PENDING_APPROVAL | APPROVED -> CANCELLED at once;
--                  EXECUTING -> CANCELLED once its in-flight nodes settle.
-- Nodes not yet started (PENDING, READY) become SKIPPED. A side effect already
-- out (SUBMITTING, SUBMITTED, OBSERVING, UNKNOWN) is never abandoned: the
-- movement keeps EXECUTING with stop_reason CANCELLED until it settles (and
-- ends FAILED instead if one of those nodes fails). Cancelling a movement
-- already being cancelled changes nothing. Terminal movements raise QT020.
-- The actor is the session's login unless p_actor names one.
-- Locks: the request, then all its nodes (waits for a dispatcher mid-claim).
CREATE OR REPLACE FUNCTION cancel_movement(p_movement_id bigint, p_actor text DEFAULT NULL, p_reason text DEFAULT NULL)
RETURNS qtg.request_state
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_actor IS NOT NULL AND btrim(p_actor) = '' THEN
        RAISE EXCEPTION 'cancel_movement needs the operator''s name' USING ERRCODE = 'QT002';
    END IF;
    RETURN stop_movement(p_movement_id, 'CANCELLED', coalesce(p_actor, session_user), p_reason);
END
$$;
