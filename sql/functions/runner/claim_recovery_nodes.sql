-- claim_recovery_nodes: recovery's claim; UNKNOWN and SUBMITTING stay as they are.
--
-- Candidates, never quarantined ones, through the recoverable partial index:
--   lease over    UNKNOWN and SUBMITTING nodes whose lease_until has passed (a
--                 dispatcher that died or hung between its claim and its
--                 report; an UNKNOWN node due for another look);
--   claimer dead  SUBMITTING and UNKNOWN nodes whose open claim names a worker
--                 (claimer_worker, claimer_instance) that its heartbeat row
--                 says is dead: it stopped (worker_stopped, a clean exit), or
--                 it missed two expected ticks (killed, or its host is gone).
--                 Taken at once, whatever the lease says. A claimer that is
--                 alive but silent (a hung call) is bounded by the lease only.
-- Up to p_max rows, oldest lease first, FOR UPDATE SKIP LOCKED. Each kind is
-- found through its partial index (recoverable: the lease; claimer: a dead
-- worker's open claims, once the dead workers are known), so the claim costs
-- what is due, not what is in flight. Planned per call (force_custom_plan),
-- with the clock and the dead instances as values: a plan that could not see
-- how few they are scanned every node in flight instead (1.7 ms a call with
-- 8,192 in flight).
-- A node taken from a lost claim (every SUBMITTING one, and an UNKNOWN one
-- still under a recovery claim that named its worker's instance) counts one
-- more lost claim; one whose lost
-- claims in a row reach engine_limits.quarantine_after_lost_claims is
-- quarantined instead (set_quarantine): it may be what kills its claimers,
-- and is not handed out again until an operator releases it.
-- Each claim hands recovery a new claim secret (the node keeps its claim_hash)
-- and bumps the claim counter: the stale dispatcher's late complete_submit,
-- with the old secret, raises QT030. It sets a recovery lease of
-- p_lease_seconds so that two recovery workers never reconcile the same node at
-- once, and records the recovery worker's own heartbeat (p_worker,
-- p_instance_id, as claim_ready_nodes does); the claim commits at once and
-- recover() runs outside any lock (reconcile-only contract).
-- Locks: nodes only. Returns each node with its latest intent, the evidence
-- recover() needs.
CREATE OR REPLACE FUNCTION claim_recovery_nodes(
    p_worker        text,
    p_max           integer DEFAULT 10,
    p_lease_seconds numeric DEFAULT 120,
    p_instance_id   text DEFAULT NULL
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
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now        timestamptz := clock();
    v_limit      integer;
    v_take       bigint[];   -- the candidates handed out,
    v_doomed     bigint[];   -- and those quarantined instead,
    v_doomed_for integer[];  -- with their lost claims in a row
    v_dead_workers   text[]; -- the heartbeats that say their worker is dead
    v_dead_instances text[];
BEGIN
    PERFORM check_read_committed('claim_recovery_nodes');
    PERFORM check_claim_args('claim_recovery_nodes', p_worker, p_max, p_lease_seconds, p_instance_id);
    SELECT quarantine_after_lost_claims INTO STRICT v_limit FROM engine_limits;

    -- the workers known dead, first: their open claims are then found through
    -- the claimer index, as the run-out leases are through the recoverable one
    SELECT coalesce(array_agg(hb.worker_name), '{}'), coalesce(array_agg(hb.instance_id), '{}')
      INTO v_dead_workers, v_dead_instances
      FROM worker_heartbeats hb
     WHERE NOT hb.live OR v_now - hb.last_tick_at > hb.expected_interval_seconds * 2;

    WITH candidates AS (
        SELECT node.id, node.lease_until,
               node.node_state = 'SUBMITTING' OR node.claimer_instance IS NOT NULL AS lost
          FROM movement_request_nodes node
         WHERE node.node_state IN ('UNKNOWN', 'SUBMITTING')
           AND node.quarantined_at IS NULL
           AND (node.lease_until <= v_now
                OR (node.claimer_instance = ANY (v_dead_instances)
                    AND (node.claimer_worker, node.claimer_instance) IN (
                            SELECT d.worker, d.instance
                              FROM unnest(v_dead_workers, v_dead_instances) AS d(worker, instance))))
         ORDER BY node.lease_until, node.id
         LIMIT p_max
           FOR UPDATE OF node SKIP LOCKED
    ), counted AS (
        UPDATE movement_request_nodes node
           SET lost_claims = node.lost_claims + 1
          FROM candidates c
         WHERE node.id = c.id
           AND c.lost
        RETURNING node.id, node.lost_claims
    )
    SELECT array_agg(c.id ORDER BY c.lease_until, c.id) FILTER (WHERE k.lost_claims IS NULL OR k.lost_claims < v_limit),
           array_agg(c.id ORDER BY c.id) FILTER (WHERE k.lost_claims >= v_limit),
           array_agg(k.lost_claims ORDER BY c.id) FILTER (WHERE k.lost_claims >= v_limit)
      INTO v_take, v_doomed, v_doomed_for
      FROM candidates c
      LEFT JOIN counted k ON k.id = c.id;

    IF v_doomed IS NOT NULL THEN
        PERFORM set_quarantine(
            v_doomed,
            ARRAY(SELECT format('its last %s claims ended without a report: their claimers died or their '
                                'leases ran out (engine_limits.quarantine_after_lost_claims = %s)', n, v_limit)
                    FROM unnest(v_doomed_for) WITH ORDINALITY AS u(n, ord) ORDER BY u.ord),
            array_fill(p_worker, ARRAY[cardinality(v_doomed)]));
    END IF;
    IF v_take IS NULL THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE movement_request_nodes node
           SET claim_token       = node.claim_token + 1,
               claim_hash        = claim_hash(fresh.secret),
               claimed_by        = p_worker,
               claimer_worker    = CASE WHEN p_instance_id IS NOT NULL THEN p_worker END,
               claimer_instance  = p_instance_id,
               claimed_at        = v_now,
               lease_until       = v_now + make_interval(secs => p_lease_seconds::double precision),
               recovery_attempts = node.recovery_attempts + 1,
               updated_at        = v_now
          FROM (SELECT t.id, claim_secret() AS secret FROM unnest(v_take) AS t(id)) fresh
         WHERE node.id = fresh.id
        RETURNING node.*, fresh.secret
    ), audited AS (
        SELECT write_audit(array_agg((p_worker, 'node', claimed.id::text, claimed.request_id, 'recovery_claimed',
                                      claimed.node_state::text, claimed.node_state::text,
                                      jsonb_strip_nulls(jsonb_build_object(
                                          'claim_token', claimed.claim_token, 'attempt', claimed.recovery_attempts,
                                          'lost_claims', claimed.lost_claims, 'instance', p_instance_id))
                                     )::qtg.audit_event ORDER BY claimed.id))
          FROM claimed
    )
    SELECT claimed.id, claimed.request_id, claimed.secret, claimed.node_state, claimed.node_key,
           claimed.executor_key, claimed.has_side_effect, claimed.node_config, claimed.lane, claimed.external_ref,
           request.amount, request.asset, claimed.recovery_attempts,
           intent_document(claimed.id)
      FROM claimed
      JOIN movement_requests request ON request.id = claimed.request_id
     CROSS JOIN audited
     ORDER BY claimed.id;
END
$$;
