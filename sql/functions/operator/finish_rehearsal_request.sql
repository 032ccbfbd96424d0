-- finish_rehearsal_request: a claimed rehearsal request closed by the
-- service that claimed it: finished_at = the clock, with the rehearsal it
-- recorded (record_rehearsal's id, a rehearsal of the request's movement) or
-- the problem that kept it from recording one (the rehearsal could not run,
-- or its record was refused), exactly one of the two. Only the claim that
-- holds it may finish it: the login that claimed it (claimed_by =
-- session_user), giving back the claim's number claim_rehearsal_request
-- handed it (p_claim). The same call again, once finished, answers the same
-- and changes nothing.
-- The rehearsal must be one this claim recorded: of the request's movement,
-- by the calling login, since the claim (not an older one of its own, nor
-- another operator's). Audited: rehearsal_request_finished (entity request:
-- the movement), with the request, the claim, and the rehearsal or the problem.
-- Refused, and nothing changes: QT002 both or neither of p_rehearsal_id and
-- p_problem, a blank or unprintable problem, a rehearsal that does not exist,
-- is another movement's, or was not recorded by this claim; QT005 a problem beyond engine_limits.max_text_bytes (4 KiB);
-- QT026 a request that does not exist, is not claimed by the calling login
-- (never claimed, or taken over by another service after 30 minutes), whose
-- claim now is not p_claim (taken over by another service of the same login,
-- or a number never handed out), or is finished already with another outcome.
-- Locks: the request (FOR UPDATE).
-- Returns when it was finished.
CREATE OR REPLACE FUNCTION finish_rehearsal_request(
    p_request_id   bigint,
    p_claim        integer,
    p_rehearsal_id bigint,
    p_problem      text
)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_request  rehearsal_requests;
    v_movement bigint;
BEGIN
    IF num_nonnulls(p_rehearsal_id, p_problem) <> 1 THEN
        RAISE EXCEPTION 'finish_rehearsal_request: give the rehearsal recorded or the problem, exactly one of them'
            USING ERRCODE = 'QT002',
                  HINT = 'Pass record_rehearsal''s id when the rehearsal was recorded, else why it was not.';
    END IF;
    IF btrim(p_problem) = '' THEN
        RAISE EXCEPTION 'finish_rehearsal_request: the problem is blank'
            USING ERRCODE = 'QT002', HINT = 'Say why no rehearsal was recorded.';
    END IF;
    IF unprintable(p_problem) THEN
        RAISE EXCEPTION 'finish_rehearsal_request: the problem holds a control character or a bidirectional override'
            USING ERRCODE = 'QT002', HINT = 'Say why in one line of printable text: it is shown to the operators.';
    END IF;
    PERFORM check_limits('finish_rehearsal_request', p_text => ARRAY[p_problem]);

    SELECT * INTO v_request FROM rehearsal_requests q WHERE q.id = p_request_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rehearsal request % does not exist', coalesce(p_request_id::text, 'NULL')
            USING ERRCODE = 'QT026', HINT = 'Finish the request claim_rehearsal_request handed you.';
    END IF;
    IF v_request.claimed_by IS DISTINCT FROM session_user THEN
        RAISE EXCEPTION 'rehearsal request % is %, not yours to finish', p_request_id,
                        CASE WHEN v_request.claimed_by IS NULL THEN 'not claimed'
                             ELSE format('claimed by %s', v_request.claimed_by) END
            USING ERRCODE = 'QT026',
                  HINT = 'Claim a request first (claim_rehearsal_request); a claim older than 30 minutes is taken over.';
    END IF;
    IF v_request.claims IS DISTINCT FROM p_claim THEN
        RAISE EXCEPTION 'rehearsal request % is held by its claim % (by %), not by claim %: not yours to finish',
                        p_request_id, v_request.claims, v_request.claimed_by, coalesce(p_claim::text, 'NULL')
            USING ERRCODE = 'QT026',
                  HINT = 'Another service of the same login took the request over after 30 minutes; drop this outcome.';
    END IF;
    IF v_request.finished_at IS NOT NULL THEN
        IF (v_request.rehearsal_id, v_request.problem) IS NOT DISTINCT FROM (p_rehearsal_id, p_problem) THEN
            RETURN v_request.finished_at;  -- the same call again
        END IF;
        RAISE EXCEPTION 'rehearsal request % is finished already, %', p_request_id,
                        CASE WHEN v_request.rehearsal_id IS NOT NULL THEN format('with rehearsal %s', v_request.rehearsal_id)
                             ELSE format('with the problem %s', quote_literal(left(v_request.problem, 200))) END
            USING ERRCODE = 'QT026', HINT = 'A request is finished once; ask for another rehearsal instead.';
    END IF;
    IF p_rehearsal_id IS NOT NULL THEN
        SELECT h.movement_id INTO v_movement FROM movement_rehearsals h WHERE h.id = p_rehearsal_id;
        IF v_movement IS DISTINCT FROM v_request.movement_id THEN
            RAISE EXCEPTION 'rehearsal % is not a rehearsal of movement %', p_rehearsal_id, v_request.movement_id
                USING ERRCODE = 'QT002', HINT = 'Pass the id record_rehearsal returned for the request''s movement.';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM movement_rehearsals h
                        WHERE h.id = p_rehearsal_id AND h.recorded_by = session_user
                          AND h.recorded_at >= v_request.claimed_at) THEN
            RAISE EXCEPTION 'rehearsal % was not recorded by this claim of request % (by %, since %)',
                            p_rehearsal_id, p_request_id, session_user, v_request.claimed_at
                USING ERRCODE = 'QT002',
                      HINT = 'Rehearse the movement now and pass the id record_rehearsal returns.';
        END IF;
    END IF;

    UPDATE rehearsal_requests q
       SET finished_at = clock(), rehearsal_id = p_rehearsal_id, problem = p_problem
     WHERE q.id = p_request_id
    RETURNING q.finished_at INTO v_request.finished_at;
    PERFORM write_audit(ARRAY[(session_user, 'request', v_request.movement_id::text, v_request.movement_id,
                               'rehearsal_request_finished', r.request_state::text, r.request_state::text,
                               jsonb_build_object('request_id', p_request_id, 'claim', p_claim,
                                                  'rehearsal_id', p_rehearsal_id,
                                                  'problem', left(p_problem, 500)))::qtg.audit_event])
      FROM movement_requests r WHERE r.id = v_request.movement_id;
    RETURN v_request.finished_at;
END
$$;
