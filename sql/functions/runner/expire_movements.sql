-- expire_movements: PENDING_APPROVAL | APPROVED | EXECUTING -> EXPIRED, for
-- movements past expires_at that have not started a side effect.
--
-- A movement in which any side-effect node has left READY (in flight, or
-- already done) is never expired: money is moving and the rest of its plan
-- must run. Its expiry is waived (expiry_waived_at, audited) and it runs on.
-- Otherwise its PENDING/READY nodes are SKIPPED and it ends EXPIRED, or, when
-- a node without side effect is still in flight, it ends EXPIRED once that
-- node settles. Up to p_max requests, FOR UPDATE SKIP LOCKED; locks: request,
-- then its nodes (waiting for a dispatcher mid-claim, so its claim is seen).
-- The decision itself is recheck_expiry, which also runs when a node goes
-- back to READY in a movement whose expiry was waived. p_actor, the worker's
-- name, is the audit rows' actor (given, within engine_limits: QT002/QT005).
-- Returns the number of
-- movements expired or set to expire.
CREATE OR REPLACE FUNCTION expire_movements(p_max integer DEFAULT 100, p_actor text DEFAULT 'expiration_checker')
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_request  movement_requests;
    v_expired  integer := 0;
BEGIN
    PERFORM check_read_committed('expire_movements');
    PERFORM check_args('expire_movements', p_max => p_max, p_max_limit => 10000);
    PERFORM check_worker('expire_movements', p_actor);

    FOR v_request IN
        SELECT * FROM movement_requests
         WHERE request_state IN ('PENDING_APPROVAL', 'APPROVED', 'EXECUTING')
           AND expires_at IS NOT NULL AND stop_reason IS NULL AND expiry_waived_at IS NULL
           AND expires_at <= v_now
         ORDER BY expires_at
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    LOOP
        IF recheck_expiry(v_request.id, p_actor) THEN
            v_expired := v_expired + 1;
        END IF;
    END LOOP;
    RETURN v_expired;
END
$$;
