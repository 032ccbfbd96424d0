-- claim_ready_nodes: READY -> SUBMITTING, in one batch, with an intent row each;
-- with p_start, APPROVED movements start first and their roots are claimed with
-- the READY nodes.
--
-- READY means every parent is COMPLETED (pending_parents reached 0) and the
-- request is EXECUTING with no stop requested. The claim does not re-check the
-- request: that is an invariant every path keeps (cancel and expiry lock the
-- nodes and skip READY ones; nothing makes a node READY under a stop). An
-- UNKNOWN node is never READY, so a side effect in doubt is never handed out,
-- and a quarantined node is never claimed (the READY index leaves it out).
-- The claim takes up to p_max READY rows whose not_before has passed, and
-- that wait for no abandoned intent's nonce (awaits_nonce_of: requeue_node), through
-- the READY partial index, with FOR UPDATE SKIP LOCKED: concurrent dispatchers
-- get disjoint rows, and a claimer that dies before commit leaves them READY.
-- Each claimed node gets a new claim secret (claim_secret: returned to the
-- claimer only, the one proof every later call must present; the node keeps
-- its claim_hash), a new claim_token (the claim counter, which names the
-- intent), a lease of p_lease_seconds (after which recovery may take it),
-- and a node_intents row with the attempt's idempotency key, committed before
-- any side effect. p_worker and p_instance_id name the claiming worker as its
-- heartbeat does (worker_heartbeats' worker_name and instance_id): the node
-- records them (claimer_worker, claimer_instance), and recovery takes the claim
-- at once once that heartbeat says the worker is dead, instead of after the
-- lease. Without p_instance_id, only the lease bounds the claim.
-- A node that a value limit or a tripped breaker holds (limit_holds: per
-- lane, venue and network, USDC in flight, started today, per movement) stays
-- READY, its attempts untouched; limit_held_nodes says why.
-- A node whose executor was last reported DOWN (executor_health, within five
-- minutes: a report older than that is stale, the sidecar that made it gone)
-- stays READY, its attempts untouched, until the executor is up again; the
-- reason shows in executor_status and stuck_nodes.
-- A node with parents gets what they left as its inputs ({parent node_key:
-- {executor_key, external_ref, evidence}}; all of them are COMPLETED, or the
-- node would not be READY): a mint takes its burn's attested message from
-- there, a deposit confirmation its transfer's hash. A root node gets NULL.
-- Starting (p_start, 0 to 10000, QT002 otherwise; 0: none): up to p_start
-- approved movements start first, exactly as start_approved_movements starts
-- them (start_movement_rows: EXECUTING, audited, a movement.executing callback
-- each), and their roots compete with the READY nodes for the batch by the
-- same order and the same rules (quarantine, not_before, executor DOWN, value
-- limits). A root claimed so goes PENDING -> SUBMITTING in one row write, its
-- PENDING -> READY event audited before its claim's; the roots left over are
-- made READY, audited, and announced for the other dispatchers. One call and
-- one transaction where a start and a claim took two, and a movement's root
-- is written once instead of twice. A claim that started movements commits
-- synchronously whatever the caller set (synchronous_commit on for its
-- transaction): their callbacks leave the database. One that started none
-- keeps the caller's setting (the dispatcher's claim commits asynchronously:
-- node_dispatcher.asynchronous_commit).
-- Locks: the value limits, then the movements started and their roots, then
-- the READY nodes (requests are not needed for those: READY implies an
-- EXECUTING request, and cancel/expiry wait on these node locks).
-- The claim's one plan is the same whatever the arguments (the READY index, in
-- order, up to p_max), so the generic plan is pinned: with a large history the
-- plan cache otherwise re-plans the claim on every call (measured by
-- `make bench`, case 3: about 0.2 ms a call at a million finished nodes).
CREATE OR REPLACE FUNCTION claim_ready_nodes(
    p_worker        text,
    p_max           integer DEFAULT 10,
    p_lease_seconds numeric DEFAULT 300,
    p_instance_id   text DEFAULT NULL,
    p_start         integer DEFAULT 0
) RETURNS TABLE (
    node_id         bigint,
    request_id      bigint,
    claim_secret    text,
    intent_id       bigint,
    idempotency_key text,
    node_key        text,
    executor_key    text,
    has_side_effect boolean,
    node_config     jsonb,
    lane            text,
    amount          numeric,
    asset           text,
    attempt         integer,
    inputs          jsonb
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_limited boolean;
    v_ids     bigint[];
    v_start   record;
    v_waiting bigint[];
BEGIN
    PERFORM check_read_committed('claim_ready_nodes');
    PERFORM check_claim_args('claim_ready_nodes', p_worker, p_max, p_lease_seconds, p_instance_id);
    IF p_start IS NULL OR p_start < 0 OR p_start > 10000 THEN
        RAISE EXCEPTION 'claim_ready_nodes: p_start must be between 0 and 10000, got %', coalesce(p_start::text, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;

    -- value limits: every limit row locked first, so two claims never spend
    -- the same room (the statements below see what a claim that held them
    -- before committed); no limit and no live breaker (a pause whose time
    -- ran out holds nothing), nothing is locked or checked
    PERFORM 1 FROM value_limits ORDER BY scope, name FOR UPDATE;
    v_limited := FOUND OR EXISTS (SELECT 1 FROM breakers b WHERE b.expires_at IS NULL OR b.expires_at > v_now);

    SELECT * INTO v_start FROM start_movement_rows(p_start, p_worker);

    SELECT array_agg(c.id ORDER BY c.priority DESC, c.id) INTO v_ids
      FROM (SELECT node.id, node.priority
              FROM movement_request_nodes node
             WHERE node.node_state = 'READY'
               AND node.quarantined_at IS NULL
               AND (node.not_before IS NULL OR node.not_before <= v_now)
               AND node.awaits_nonce_of IS NULL
               AND NOT EXISTS (SELECT 1 FROM executor_health health
                                WHERE health.executor_key = node.executor_key
                                  AND health.status = 'DOWN'
                                  AND health.checked_at > v_now - interval '5 minutes')
             ORDER BY node.priority DESC, node.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED) c;
    IF v_start.roots IS NOT NULL THEN
        -- the roots just started and the READY nodes: the first p_max by the claim's order
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.id) INTO v_ids
          FROM (SELECT node.id, node.priority
                  FROM movement_request_nodes node
                 WHERE node.id = ANY (v_start.roots || coalesce(v_ids, '{}'))
                   AND node.quarantined_at IS NULL
                   AND (node.not_before IS NULL OR node.not_before <= v_now)
                   AND NOT EXISTS (SELECT 1 FROM executor_health health
                                    WHERE health.executor_key = node.executor_key
                                      AND health.status = 'DOWN'
                                      AND health.checked_at > v_now - interval '5 minutes')
                 ORDER BY node.priority DESC, node.id
                 LIMIT p_max) c;
    END IF;
    IF v_limited AND v_ids IS NOT NULL THEN
        v_ids := ARRAY(SELECT u.id FROM unnest(v_ids) WITH ORDINALITY AS u(id, ord)
                        WHERE u.id NOT IN (SELECT h.node_id FROM limit_holds(v_ids, v_now) h)
                        ORDER BY u.ord);
    END IF;
    IF v_start.started > 0 THEN
        -- the roots this call does not claim wait READY for the next claim
        SELECT array_agg(r.id) INTO v_waiting
          FROM unnest(v_start.roots) AS r(id)
         WHERE r.id <> ALL (coalesce(v_ids, '{}'));
        IF v_waiting IS NOT NULL THEN
            UPDATE movement_request_nodes node
               SET node_state = 'READY', updated_at = v_now
             WHERE node.id = ANY (v_waiting);
            PERFORM notify_work('ready');
        END IF;
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;

    RETURN QUERY
    WITH candidates AS (
        SELECT u.id FROM unnest(v_ids) AS u(id)
    ), claimed AS (
        UPDATE movement_request_nodes node
           SET node_state       = 'SUBMITTING',
               claim_token      = node.claim_token + 1,
               claim_hash       = claim_hash(fresh.secret),
               claimed_by       = p_worker,
               claimer_worker   = CASE WHEN p_instance_id IS NOT NULL THEN p_worker END,
               claimer_instance = p_instance_id,
               claimed_at       = v_now,
               lease_until      = v_now + make_interval(secs => p_lease_seconds::double precision),
               submit_attempts  = node.submit_attempts + 1,
               not_before       = NULL,
               updated_at       = v_now
          FROM (SELECT candidates.id, claim_secret() AS secret FROM candidates) fresh
         WHERE node.id = fresh.id
        RETURNING node.*, fresh.secret
    ), intents AS (
        INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by, intent_state, created_at,
                                  value_counted)
        SELECT claimed.id, claimed.claim_token,
               format('%s%sx%s', left(current_schema(), 1), claimed.id, claimed.claim_token),
               p_worker, 'CLAIMED', v_now,
               -- the scopes with a daily cap its amount counts in (below), which
               -- give_back_value gives back to exactly
               CASE WHEN v_limited AND claimed.has_side_effect THEN
                   (SELECT array_agg(l.scope || ':' || l.name ORDER BY l.scope, l.name)
                      FROM value_limits l
                     WHERE l.max_per_day IS NOT NULL
                       AND ((l.scope = 'lane' AND l.name = claimed.lane)
                         OR (l.scope = 'venue' AND l.name = claimed.executor_key)
                         OR l.scope = 'network'))
               END
          FROM claimed
        RETURNING node_intents.id, node_intents.node_id, node_intents.idempotency_key,
                  node_intents.value_counted
    ), counted AS (
        -- the day's usage of the scopes each intent records
        INSERT INTO value_usage AS v (scope, name, day, started)
        SELECT split_part(s.scope_name, ':', 1), split_part(s.scope_name, ':', 2), (v_now AT TIME ZONE 'UTC')::date,
               sum(request.amount)
          FROM intents
          JOIN claimed ON claimed.id = intents.node_id
          JOIN movement_requests request ON request.id = claimed.request_id
         CROSS JOIN unnest(intents.value_counted) AS s(scope_name)
         GROUP BY 1, 2
        ON CONFLICT (scope, name, day) DO UPDATE SET started = v.started + excluded.started
    ), audited AS (
        -- the roots' readying first (each before its claim), one batch with the claims
        SELECT write_audit(v_start.readied
                           || array_agg((p_worker, 'node', claimed.id::text, claimed.request_id, 'state_changed',
                                         'READY', 'SUBMITTING', jsonb_strip_nulls(jsonb_build_object(
                                             'claim_token', claimed.claim_token, 'instance', p_instance_id))
                                        )::qtg.audit_event ORDER BY claimed.priority DESC, claimed.id))
          FROM claimed
    )
    SELECT claimed.id, claimed.request_id, claimed.secret, intents.id, intents.idempotency_key,
           claimed.node_key, claimed.executor_key, claimed.has_side_effect, claimed.node_config, claimed.lane,
           request.amount, request.asset, claimed.submit_attempts, parents.inputs
      FROM claimed
      JOIN intents ON intents.node_id = claimed.id
      JOIN movement_requests request ON request.id = claimed.request_id
      LEFT JOIN LATERAL (
          SELECT jsonb_object_agg(parent.node_key, jsonb_build_object(
                     'executor_key', parent.executor_key, 'external_ref', parent.external_ref,
                     'evidence', parent.evidence)) AS inputs
            FROM movement_plan_edges edge
            JOIN movement_request_nodes parent ON parent.id = edge.parent_node_id
           WHERE edge.child_node_id = claimed.id
      ) parents ON true
     CROSS JOIN audited
     ORDER BY claimed.priority DESC, claimed.id;
END
$$;
