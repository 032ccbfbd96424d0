-- complete_observe: SUBMITTED | OBSERVING -> OBSERVING | COMPLETED | FAILED | UNKNOWN.
--
--   PENDING    still in flight: OBSERVING, next_observe_at from the lane's
--              pacing (phase from time observing vs baseline; the executor's
--              retry_after_seconds hint replaces the computed delay). When the
--              phase is fatal the node goes to UNKNOWN for recovery instead.
--   COMPLETED  COMPLETED; children whose parents are all done become READY.
--   FAILED     FAILED; descendants are SKIPPED.
--   UNKNOWN    the outcome cannot be determined: UNKNOWN for recovery, unless a
--              retry_after_seconds hint says to look again (then OBSERVING,
--              while the phase is not fatal).
--   ERROR      the observe call itself failed (the service, the network, no
--              executor in this runner): OBSERVING again after the hint or the
--              lane's observe_error_retry_seconds; UNKNOWN once the phase is fatal.
-- A node seen COMPLETED in its first observation window (observe_started_at =
-- submitted_at: not a window recovery opened) leaves its lane a latency sample
-- (lane_latency_samples: done after the node's last look, by this one), from
-- which refresh_lane_pacing learns the lane's schedule.
-- Fenced by the claim's secret (QT030). Locks: request, node (already held by the
-- observer's claim). The DAG step and the settle: finish_nodes, for a node that
-- finished (COMPLETED or FAILED; to it, any other state is nothing). Returns the
-- node's new state, phase and next observation.
CREATE OR REPLACE FUNCTION complete_observe(
    p_node_id             bigint,
    p_claim_secret        text,
    p_outcome             text,
    p_evidence            jsonb DEFAULT NULL,
    p_retry_after_seconds numeric DEFAULT NULL
) RETURNS TABLE (node_state qtg.node_state, observe_phase qtg.observe_phase, next_observe_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_node   movement_request_nodes;
    v_hint   numeric := p_retry_after_seconds;
    v_pacing record;
    v_to     qtg.node_state;
BEGIN
    PERFORM check_args('complete_observe', p_outcome => p_outcome,
                       p_outcomes => '{PENDING,COMPLETED,FAILED,UNKNOWN,ERROR}', p_retry_after => p_retry_after_seconds);
    PERFORM check_limits('complete_observe', p_json => ARRAY[p_evidence]);
    v_node := lock_claimed_node(p_node_id, p_claim_secret, ARRAY['SUBMITTED', 'OBSERVING']::qtg.node_state[],
                                'complete_observe');
    IF p_outcome = 'ERROR' AND v_hint IS NULL THEN
        v_hint := (lane_of(v_node.lane)).observe_error_retry_seconds;
    END IF;
    SELECT * INTO STRICT v_pacing FROM observe_pacing(v_node.lane, v_node.observe_started_at, v_now, v_hint);

    v_to := CASE
                WHEN p_outcome IN ('COMPLETED', 'FAILED') THEN p_outcome::qtg.node_state
                WHEN v_pacing.phase = 'fatal' THEN 'UNKNOWN'
                WHEN p_outcome = 'UNKNOWN' AND v_hint IS NULL THEN 'UNKNOWN'
                ELSE 'OBSERVING'
            END;

    UPDATE movement_request_nodes node
       SET node_state       = v_to,
           observe_phase    = v_pacing.phase,
           next_observe_at  = CASE WHEN v_to = 'OBSERVING' THEN v_pacing.next_observe_at END,
           observe_count    = node.observe_count + 1,
           last_observed_at = v_now,
           evidence         = coalesce(p_evidence, node.evidence),
           lease_until      = CASE WHEN v_to = 'UNKNOWN' THEN v_now END,
           finished_at      = CASE WHEN v_to IN ('COMPLETED', 'FAILED') THEN v_now END,
           lost_claims      = 0,   -- the node got as far as an observation
           updated_at       = v_now
     WHERE node.id = p_node_id;

    IF v_to IS DISTINCT FROM v_node.node_state THEN
        PERFORM write_audit(ARRAY[(v_node.claimed_by, 'node', p_node_id::text, v_node.request_id, 'state_changed',
                                   v_node.node_state::text, v_to::text,
                                   jsonb_build_object('outcome', p_outcome, 'phase', v_pacing.phase,
                                                      'evidence', p_evidence))::qtg.audit_event]);
    END IF;
    IF v_to = 'COMPLETED' AND v_node.observe_started_at = v_node.submitted_at THEN
        INSERT INTO lane_latency_samples (lane, after_seconds, by_seconds, finished_at)
        SELECT v_node.lane, least(s.after_seconds, s.by_seconds), s.by_seconds, v_now
          FROM (SELECT greatest(0, extract(epoch FROM coalesce(v_node.last_observed_at, v_node.observe_started_at)
                                                      - v_node.observe_started_at)) AS after_seconds,
                       greatest(0, extract(epoch FROM v_now - v_node.observe_started_at)) AS by_seconds) s;
    END IF;
    -- the DAG step and the settle; a node still in flight or UNKNOWN has none
    IF v_to IN ('COMPLETED', 'FAILED') THEN
        PERFORM finish_nodes(ARRAY[p_node_id], ARRAY[v_node.claimed_by]);
    END IF;

    node_state := v_to;
    observe_phase := v_pacing.phase;
    next_observe_at := CASE WHEN v_to = 'OBSERVING' THEN v_pacing.next_observe_at END;
    RETURN NEXT;
END
$$;
