-- cancel_movement: PENDING_APPROVAL | APPROVED -> CANCELLED at once;
--                  EXECUTING -> CANCELLED once its in-flight nodes settle.
-- Nodes not yet started (PENDING, READY) become SKIPPED. A side effect already
-- out (SUBMITTING, SUBMITTED, OBSERVING, UNKNOWN) is never abandoned: the
-- movement keeps EXECUTING with stop_reason CANCELLED until it settles (and
-- ends FAILED instead if one of those nodes fails). Cancelling a movement
-- already being cancelled changes nothing. Terminal movements raise QT020.
-- Locks: the request, then all its nodes (waits for a dispatcher mid-claim).
-- The canceller is the calling login (session_user).
CREATE OR REPLACE FUNCTION cancel_movement(p_movement_id bigint, p_reason text DEFAULT NULL)
RETURNS qtg.request_state
LANGUAGE sql
AS $$
    SELECT stop_movement(p_movement_id, 'CANCELLED', session_user, p_reason);
$$;
