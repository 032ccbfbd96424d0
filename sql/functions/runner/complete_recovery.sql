-- complete_recovery: UNKNOWN | SUBMITTING -> COMPLETED | FAILED | SUBMITTED |
--                    OBSERVING | READY | UNKNOWN, from recover()'s evidence.
--
--   COMPLETED      the side effect happened and finished.
--   FAILED         it happened and failed, or it can never happen.
--   IN_FLIGHT      it is out and not finished: back to SUBMITTED (never
--                  observed yet) or OBSERVING, with a fresh observation window.
--   NOT_SUBMITTED  evidence proves nothing went out: READY for a new attempt,
--                  the day's value usage of the claim given back
--                  (SKIPPED if a stop was requested). Refused (QT021) once the
--                  node's intent is PREPARED or SUBMITTED on a side-effecting
--                  executor: a prepared payload may be out there, so it is
--                  resubmitted as it is (and reported IN_FLIGHT) or concluded
--                  from evidence; a fresh payload needs requeue_node by two
--                  operators. One exception: a cctp_mint whose mint reverted
--                  past its message's expirationBlock, nothing minted
--                  (cctp_mint_expiry_problem), is READY for a mint of the
--                  message re-attested, the same nonce, received once.
--   STILL_UNKNOWN  no conclusion yet: UNKNOWN, looked at again after
--                  p_retry_after_seconds, or the lane's recovery_retry_seconds.
-- COMPLETED and FAILED on a side effect that may be out stand on the
-- executor's evidence, checked as far as SQL can (recovery_evidence_problem:
-- QT002 none, QT032 evidence of another side effect or a payload that is no
-- longer its route's); refused, nothing changes.
-- Fenced by the claim's secret (QT030); accepted after the recovery lease ran out
-- while no other recovery claim has taken the node (evidence stays evidence).
-- Locks: request, node, intent. The DAG step and the settle: finish_nodes.
-- Returns the node's state afterwards (a READY node whose movement expired is SKIPPED).
CREATE OR REPLACE FUNCTION complete_recovery(
    p_node_id             bigint,
    p_claim_secret        text,
    p_outcome             text,
    p_evidence            jsonb DEFAULT NULL,
    p_external_ref        text DEFAULT NULL,
    p_retry_after_seconds numeric DEFAULT NULL
) RETURNS qtg.node_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_node     movement_request_nodes;
    v_pacing   record;
    v_stopping boolean;
    v_to       qtg.node_state;
    v_wait     numeric;
    v_problem  text;
BEGIN
    PERFORM check_read_committed('complete_recovery');
    PERFORM check_args('complete_recovery', p_outcome => p_outcome,
                       p_outcomes => '{COMPLETED,FAILED,IN_FLIGHT,NOT_SUBMITTED,STILL_UNKNOWN}',
                       p_retry_after => p_retry_after_seconds);
    PERFORM check_limits('complete_recovery', p_json => ARRAY[p_evidence], p_text => ARRAY[p_external_ref]);
    v_node := lock_claimed_node(p_node_id, p_claim_secret, ARRAY['UNKNOWN', 'SUBMITTING']::qtg.node_state[],
                                'complete_recovery');
    IF p_outcome = 'NOT_SUBMITTED' AND v_node.has_side_effect AND (
           SELECT intent.intent_state IN ('PREPARED', 'SUBMITTED') FROM node_intents intent
            WHERE intent.node_id = p_node_id ORDER BY intent.claim_token DESC LIMIT 1) THEN
        v_problem := cctp_mint_expiry_problem(p_node_id, p_evidence, p_external_ref);
    END IF;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'node %: its side effect was prepared, so recovery cannot report it NOT_SUBMITTED (%)',
                        p_node_id, v_problem
            USING ERRCODE = 'QT021',
                  HINT = 'Resubmit the prepared payload and report IN_FLIGHT, conclude COMPLETED, FAILED or '
                         'STILL_UNKNOWN from evidence, or have two operators call requeue_node.';
    END IF;
    v_problem := recovery_evidence_problem(p_node_id, p_outcome, p_evidence, p_external_ref);
    PERFORM raise_node_error(left(v_problem, 5), substr(v_problem, 7));
    SELECT stop_reason IS NOT NULL INTO STRICT v_stopping FROM movement_requests WHERE id = v_node.request_id;
    SELECT * INTO STRICT v_pacing FROM observe_pacing(v_node.lane, v_now, v_now, p_retry_after_seconds);
    v_wait := coalesce(p_retry_after_seconds, (lane_of(v_node.lane)).recovery_retry_seconds);

    v_to := CASE p_outcome
                WHEN 'COMPLETED' THEN 'COMPLETED'
                WHEN 'FAILED' THEN 'FAILED'
                WHEN 'IN_FLIGHT' THEN CASE WHEN v_node.observe_count = 0 THEN 'SUBMITTED' ELSE 'OBSERVING' END
                WHEN 'NOT_SUBMITTED' THEN CASE WHEN v_stopping THEN 'SKIPPED' ELSE 'READY' END
                ELSE 'UNKNOWN'
            END::qtg.node_state;

    UPDATE movement_request_nodes node
       SET node_state         = v_to,
           evidence           = coalesce(p_evidence, node.evidence),
           external_ref       = coalesce(p_external_ref, node.external_ref),
           submitted_at       = CASE WHEN v_to IN ('SUBMITTED', 'OBSERVING') THEN coalesce(node.submitted_at, v_now)
                                     ELSE node.submitted_at END,
           observe_started_at = CASE WHEN v_to IN ('SUBMITTED', 'OBSERVING') THEN v_now END,
           observe_held_seconds = 0,
           observe_held_reason  = NULL,
           next_observe_at    = CASE WHEN v_to IN ('SUBMITTED', 'OBSERVING') THEN v_pacing.next_observe_at END,
           observe_phase      = CASE WHEN v_to IN ('SUBMITTED', 'OBSERVING') THEN v_pacing.phase END,
           lease_until        = CASE WHEN v_to = 'UNKNOWN'
                                     THEN v_now + make_interval(secs => v_wait::double precision)
                                END,
           not_before         = CASE WHEN v_to = 'READY' AND p_retry_after_seconds IS NOT NULL
                                     THEN v_now + make_interval(secs => p_retry_after_seconds::double precision)
                                END,
           finished_at        = CASE WHEN v_to IN ('COMPLETED', 'FAILED', 'SKIPPED') THEN v_now END,
           claimer_worker     = NULL,   -- the recovery claim ends
           claimer_instance   = NULL,
           updated_at         = v_now
     WHERE node.id = p_node_id;

    UPDATE node_intents
       SET intent_state = CASE p_outcome
                              WHEN 'NOT_SUBMITTED' THEN 'ABANDONED'
                              WHEN 'FAILED' THEN 'FAILED'
                              WHEN 'STILL_UNKNOWN' THEN intent_state
                              ELSE 'SUBMITTED'
                          END,
           external_ref = coalesce(p_external_ref, external_ref),
           finished_at  = CASE WHEN p_outcome = 'STILL_UNKNOWN' THEN finished_at ELSE v_now END
     WHERE id = (SELECT id FROM node_intents WHERE node_id = p_node_id ORDER BY claim_token DESC LIMIT 1);

    IF p_outcome = 'NOT_SUBMITTED' THEN
        PERFORM give_back_value(ARRAY[p_node_id]);  -- nothing went out: the claim started nothing
    END IF;
    PERFORM write_audit(ARRAY[(v_node.claimed_by, 'node', p_node_id::text, v_node.request_id, 'recovered',
                               v_node.node_state::text, v_to::text,
                               jsonb_build_object('outcome', p_outcome, 'evidence', p_evidence,
                                                  'external_ref', p_external_ref))::qtg.audit_event]);
    PERFORM finish_nodes(ARRAY[p_node_id], ARRAY[v_node.claimed_by]);
    RETURN (SELECT node.node_state FROM movement_request_nodes node WHERE node.id = p_node_id);
END
$$;
