-- claim_rehearsal_request: the oldest open rehearsal request handed to the
-- calling rehearsal service (`qtg rehearse --requested`, an operator's
-- login): claimed_by = session_user, claimed_at = the clock, and the claim's
-- number (claims, one more than before), which the service gives back to
-- finish_rehearsal_request. A request is claimable while it is open (not
-- finished), its movement is PENDING_APPROVAL and was not created by the
-- calling login (a creator's word on its own movement is not the second pair
-- of eyes a request asks for: the service runs with a login of its own), and
-- it is not claimed, or was claimed more than 30
-- minutes ago (a service that died: the rehearsal's own bound is an hour at
-- most, its default ten minutes, so a claim that old is taken over; the
-- service that held it is then refused its finish, QT026, even when it
-- logs in as the same login: its claim's number is an older one).
-- In passing (bounded: at most 100 a call) it finishes the open requests
-- nobody holds whose movement is no longer PENDING_APPROVAL (approved,
-- cancelled, expired meanwhile), with the problem 'the movement is no longer
-- awaiting approval'; those are never handed out. A request held by a live
-- claim is left to its service, which finishes it itself.
-- Audited: rehearsal_request_claimed (entity request: the movement), with the
-- request and the claim's number.
-- Locks: request rows only, FOR UPDATE SKIP LOCKED: two services never get
-- the same request, and neither waits for the other; the movement's state is
-- read, not locked (an approval meanwhile makes record_rehearsal refuse the
-- rehearsal, QT020, and the service finishes the request with that).
-- Returns one row (the request, its movement and the claim's number), or
-- none when nothing waits.
CREATE OR REPLACE FUNCTION claim_rehearsal_request()
RETURNS TABLE (request_id bigint, movement_id bigint, claim integer)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now   timestamptz := clock();
    v_stale timestamptz := clock() - interval '30 minutes';
BEGIN
    WITH gone AS (
        SELECT q.id
          FROM rehearsal_requests q
          JOIN movement_requests r ON r.id = q.movement_id
         WHERE q.finished_at IS NULL
           AND r.request_state <> 'PENDING_APPROVAL'
           AND (q.claimed_at IS NULL OR q.claimed_at < v_stale)
         ORDER BY q.id
         LIMIT 100
           FOR UPDATE OF q SKIP LOCKED
    )
    UPDATE rehearsal_requests q
       SET finished_at = v_now, problem = 'the movement is no longer awaiting approval'
      FROM gone
     WHERE q.id = gone.id;

    RETURN QUERY
    WITH next AS (
        SELECT q.id
          FROM rehearsal_requests q
          JOIN movement_requests r ON r.id = q.movement_id
         WHERE q.finished_at IS NULL
           AND r.request_state = 'PENDING_APPROVAL'
           AND r.created_by <> session_user
           AND (q.claimed_at IS NULL OR q.claimed_at < v_stale)
         ORDER BY q.id
         LIMIT 1
           FOR UPDATE OF q SKIP LOCKED
    ), claimed AS (
        UPDATE rehearsal_requests q
           SET claimed_by = session_user, claimed_at = v_now, claims = q.claims + 1
          FROM next
         WHERE q.id = next.id
        RETURNING q.id, q.movement_id, q.claims
    ), audited AS (
        SELECT write_audit(array_agg((session_user, 'request', c.movement_id::text, c.movement_id,
                                      'rehearsal_request_claimed', 'PENDING_APPROVAL', 'PENDING_APPROVAL',
                                      jsonb_build_object('request_id', c.id, 'claim', c.claims))::qtg.audit_event))
          FROM claimed c
    )
    SELECT c.id, c.movement_id, c.claims FROM claimed c, audited;
END
$$;
