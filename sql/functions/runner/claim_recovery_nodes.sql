-- claim_recovery_nodes: recovery's claim; UNKNOWN and SUBMITTING stay as they are.
--
-- Candidates: UNKNOWN nodes, and SUBMITTING nodes whose dispatcher lease ran out
-- (the dispatcher died or hung between its claim and complete_submit), in both
-- cases only once lease_until has passed. Up to p_max rows through the
-- recoverable partial index, FOR UPDATE SKIP LOCKED. Each claim hands recovery
-- a new claim secret (the node keeps its claim_hash) and bumps the claim
-- counter: the stale dispatcher's late complete_submit, with the old secret,
-- raises QT030. It sets a recovery lease of p_lease_seconds so that two
-- recovery workers never reconcile the same node at once; the claim commits
-- at once and recover() runs outside any lock (reconcile-only contract).
-- Returns each node with its latest intent, the evidence recover() needs.
CREATE OR REPLACE FUNCTION claim_recovery_nodes(
    p_worker        text,
    p_max           integer DEFAULT 10,
    p_lease_seconds numeric DEFAULT 120
) RETURNS TABLE (
    node_id            bigint,
    request_id         bigint,
    claim_secret       text,
    node_state         qtg.node_state,
    node_key           text,
    executor_key       text,
    has_side_effect    boolean,
    node_config        jsonb,
    lane               text,
    external_ref       text,
    amount             numeric,
    asset              text,
    recovery_attempts  integer,
    intent             jsonb
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock();
BEGIN
    PERFORM check_claim_args('claim_recovery_nodes', p_worker, p_max, p_lease_seconds);

    RETURN QUERY
    WITH candidates AS (
        SELECT node.id
          FROM movement_request_nodes node
         WHERE node.node_state IN ('UNKNOWN', 'SUBMITTING')
           AND node.lease_until <= v_now
         ORDER BY node.lease_until, node.id
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE movement_request_nodes node
           SET claim_token       = node.claim_token + 1,
               claim_hash        = claim_hash(fresh.secret),
               claimed_by        = p_worker,
               claimed_at        = v_now,
               lease_until       = v_now + make_interval(secs => p_lease_seconds::double precision),
               recovery_attempts = node.recovery_attempts + 1,
               updated_at        = v_now
          FROM (SELECT candidates.id, claim_secret() AS secret FROM candidates) fresh
         WHERE node.id = fresh.id
        RETURNING node.*, fresh.secret
    ), audited AS (
        SELECT write_audit(array_agg((p_worker, 'node', claimed.id::text, claimed.request_id, 'recovery_claimed',
                                      claimed.node_state::text, claimed.node_state::text,
                                      jsonb_build_object('claim_token', claimed.claim_token,
                                                         'attempt', claimed.recovery_attempts)
                                     )::qtg.audit_event ORDER BY claimed.id))
          FROM claimed
    )
    SELECT claimed.id, claimed.request_id, claimed.secret, claimed.node_state, claimed.node_key,
           claimed.executor_key, claimed.has_side_effect, claimed.node_config, claimed.lane, claimed.external_ref,
           request.amount, request.asset, claimed.recovery_attempts,
           (SELECT to_jsonb(i) FROM node_intents i WHERE i.node_id = claimed.id ORDER BY i.claim_token DESC LIMIT 1)
      FROM claimed
      JOIN movement_requests request ON request.id = claimed.request_id
     CROSS JOIN audited
     ORDER BY claimed.id;
END
$$;
