-- fail_submit: SUBMITTING -> READY | FAILED | UNKNOWN, after a failed submit.
--
--   retryable, and no side effect can have happened (the executor has none,
--   or the intent was never PREPARED): back to READY with not_before =
--   now + p_retry_after_seconds, or an exponential backoff (2^attempt s,
--   at most 300 s); after 10 attempts the node FAILS instead. If a stop was
--   requested meanwhile the node is SKIPPED.
--   retryable, but the intent was PREPARED (a broadcast may have happened):
--   UNKNOWN, for recovery to decide from evidence; never a blind retry.
--   Recovery takes it at once, or after p_retry_after_seconds (the outside
--   world's own wait, e.g. an exchange's rate-limit reset).
--   permanent: FAILED (the executor asserts nothing went out), and the DAG
--   skips what depended on it.
-- A claim whose intent was never PREPARED gives back the day's value usage it
-- counted (give_back_value): nothing went out.
-- Fenced by the claim's secret (QT030). Locks: request, node, intent. The DAG
-- step and the settle: finish_nodes. Returns the node's state afterwards.
CREATE OR REPLACE FUNCTION fail_submit(
    p_node_id             bigint,
    p_claim_secret        text,
    p_error               text,
    p_retryable           boolean,
    p_retry_after_seconds numeric DEFAULT NULL
) RETURNS qtg.node_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_now          timestamptz := clock();
    v_node         movement_request_nodes;
    v_prepared     boolean;
    v_stopping     boolean;
    v_to           qtg.node_state;
    v_backoff      numeric;
    c_max_attempts constant integer := 10;
BEGIN
    PERFORM check_read_committed('fail_submit');
    IF p_retryable IS NULL THEN
        RAISE EXCEPTION 'fail_submit: say whether the failure is retryable' USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_args('fail_submit', p_retry_after => p_retry_after_seconds);
    PERFORM check_limits('fail_submit', p_text => ARRAY[p_error]);
    v_node := lock_claimed_node(p_node_id, p_claim_secret, ARRAY['SUBMITTING']::qtg.node_state[], 'fail_submit',
                                'dispatched');

    -- any of the node's intents, not only its claim's: a transaction signed
    -- under an earlier claim may be out as well (the claim's is locked too)
    PERFORM 1 FROM node_intents WHERE node_id = p_node_id AND claim_token = v_node.claim_token FOR UPDATE;
    v_prepared := EXISTS (SELECT 1 FROM node_intents WHERE node_id = p_node_id AND intent_state = 'PREPARED');
    SELECT stop_reason IS NOT NULL INTO STRICT v_stopping FROM movement_requests WHERE id = v_node.request_id;

    v_to := CASE
                WHEN NOT p_retryable THEN 'FAILED'
                WHEN v_node.has_side_effect AND coalesce(v_prepared, false) THEN 'UNKNOWN'
                WHEN v_node.submit_attempts >= c_max_attempts THEN 'FAILED'
                WHEN v_stopping THEN 'SKIPPED'
                ELSE 'READY'
            END;
    v_backoff := coalesce(p_retry_after_seconds, least(300, power(2, v_node.submit_attempts)));

    UPDATE movement_request_nodes
       SET node_state       = v_to,
           last_error       = p_error,
           not_before       = CASE WHEN v_to = 'READY' THEN v_now + make_interval(secs => v_backoff::double precision) END,
           lease_until      = CASE WHEN v_to = 'UNKNOWN'
                                   THEN v_now + make_interval(secs => coalesce(p_retry_after_seconds, 0)::double precision)
                              END,
           finished_at      = CASE WHEN v_to IN ('FAILED', 'SKIPPED') THEN v_now END,
           claimer_worker   = NULL,   -- the claim ends, and its worker lived to report
           claimer_instance = NULL,
           lost_claims      = 0,
           updated_at       = v_now
     WHERE id = p_node_id;

    UPDATE node_intents
       SET intent_state = CASE WHEN v_to = 'UNKNOWN' THEN 'PREPARED' ELSE 'FAILED' END,
           finished_at  = CASE WHEN v_to = 'UNKNOWN' THEN NULL ELSE v_now END
     WHERE node_id = p_node_id AND claim_token = v_node.claim_token;

    IF v_to <> 'UNKNOWN' AND NOT coalesce(v_prepared, false) THEN
        PERFORM give_back_value(ARRAY[p_node_id]);  -- nothing went out: the claim started nothing
    END IF;
    PERFORM write_audit(ARRAY[(v_node.claimed_by, 'node', p_node_id::text, v_node.request_id, 'state_changed',
                               'SUBMITTING', v_to::text,
                               jsonb_build_object('error', p_error, 'retryable', p_retryable,
                                                  'attempt', v_node.submit_attempts,
                                                  'not_before_seconds', CASE WHEN v_to = 'READY' THEN v_backoff END)
                              )::qtg.audit_event]);
    PERFORM finish_nodes(ARRAY[p_node_id], ARRAY[v_node.claimed_by]);
    RETURN (SELECT node_state FROM movement_request_nodes WHERE id = p_node_id);
END
$$;
