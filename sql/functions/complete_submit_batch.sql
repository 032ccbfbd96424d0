-- complete_submit_batch: complete_submit for many nodes in one call and one
-- transaction. Per node: SUBMITTING -> SUBMITTED (first next_observe_at from
-- the lane's pacing), or SUBMITTING -> COMPLETED where p_settled says the
-- submit itself finished the work; the external reference is recorded on the
-- node and its intent.
--
-- Element i of every array describes one node (arrays of equal length, no node
-- twice, at most 1000; QT002 otherwise, and nothing changes; a NULL p_settled
-- or element means false). Every rule of complete_submit holds per node, and a
-- node that breaks one is left unchanged and reported in its row instead of
-- failing the batch: QT011 no such node; QT030 stale claim token (another
-- worker holds it now: drop the result, recovery reconciles); QT021 not
-- SUBMITTING. As in complete_submit, a report after the lease ran out is still
-- accepted while the token is current.
--
-- Three set-based statements, each planned per call (EXECUTE: node_intents
-- grows from empty, and a plan cached while it was small would scan it whole):
--   1. the nodes moved, their intents marked SUBMITTED, one audit row per
--      transition (actor: the claimer), as complete_submit writes them;
--   2. the DAG step of the completed nodes, what finish_node does for each
--      taken node by node in (request, node) order: each PENDING child loses
--      its completed parents and becomes READY (SKIPPED under a stop) when none
--      is left, audited with the parent whose completion moved it; each
--      request's open_nodes drops by its completed nodes and skipped children;
--      runners are woken when a child became READY;
--   3. every request with nothing open settles as settle_request settles it
--      (set_request_state, write_audit, enqueue_callback: FAILED if a node
--      failed, else its stop reason, else COMPLETED; one audit row, one
--      callback with the count of nodes by state), actor: the claimer of its
--      last completed node.
-- tests/test_complete_submit_batch.py proves the rows written are those of
-- complete_submit called node by node; change both together.
-- Locks: the nodes' requests in id order, then the nodes in id order, then
-- their intents and children (two batches never wait on each other in a cycle).
-- Returns one row per element, in input order: the node's new state, or the error.
CREATE OR REPLACE FUNCTION complete_submit_batch(
    p_node_ids      bigint[],
    p_claim_tokens  bigint[],
    p_external_refs text[],
    p_evidence      jsonb[] DEFAULT NULL,
    p_settled       boolean[] DEFAULT NULL
) RETURNS TABLE (node_id bigint, node_state qtg.node_state, error_code text, error_message text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now           timestamptz := clock();
    v_n             integer := coalesce(cardinality(p_node_ids), 0);
    v_requests      bigint[];        -- per element: the node's request,
    v_actors        text[];          -- its claimer,
    v_states        qtg.node_state[];  -- its new state (NULL when refused),
    v_codes         text[];          -- the error, if refused
    v_messages      text[];
    v_order         integer[];       -- the moved elements in (request, node) order
    v_done          bigint[];        -- the completed nodes, in that order,
    v_done_requests bigint[];        -- their requests
    v_done_actors   text[];          -- and claimers
    v_readied       bigint;
    v_settle        bigint[];        -- the requests left with nothing open
    v_settle_actors text[];
BEGIN
    IF coalesce(cardinality(p_claim_tokens), 0) <> v_n
       OR coalesce(cardinality(p_external_refs), 0) <> v_n
       OR (p_evidence IS NOT NULL AND cardinality(p_evidence) <> v_n)
       OR (p_settled IS NOT NULL AND cardinality(p_settled) <> v_n) THEN
        RAISE EXCEPTION 'complete_submit_batch: every array must have one element per node (% nodes)', v_n
            USING ERRCODE = 'QT002';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- the lock order: requests, then nodes (intents are locked by the UPDATE below)
    PERFORM lock_node_batch('complete_submit_batch', p_node_ids);

    EXECUTE $sql$
    WITH input AS (
        SELECT u.node_id, u.claim_token, u.external_ref, u.evidence, coalesce(u.settled, false) AS settled, u.ord
          FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::jsonb[], $5::boolean[])
               WITH ORDINALITY AS u(node_id, claim_token, external_ref, evidence, settled, ord)
    ), checked AS (
        SELECT i.*, n.request_id, n.claimed_by, n.lane,
               CASE WHEN i.settled THEN 'COMPLETED' ELSE 'SUBMITTED' END::qtg.node_state AS to_state,
               CASE
                   WHEN n.id IS NULL THEN 'QT011'
                   WHEN i.claim_token IS DISTINCT FROM n.claim_token THEN 'QT030'
                   WHEN n.node_state <> 'SUBMITTING' THEN 'QT021'
               END AS error_code,
               CASE
                   WHEN n.id IS NULL THEN format('complete_submit: node %s does not exist', i.node_id)
                   WHEN i.claim_token IS DISTINCT FROM n.claim_token THEN
                       format('complete_submit: stale claim on node %s: it holds token %s, the call presented %s',
                              i.node_id, n.claim_token, i.claim_token)
                   WHEN n.node_state <> 'SUBMITTING' THEN
                       format('complete_submit: node %s is %s, expected one of {SUBMITTING}', i.node_id, n.node_state)
               END AS error_message
          FROM input i
          LEFT JOIN movement_request_nodes n ON n.id = i.node_id
    ), moved AS (
        UPDATE movement_request_nodes n
           SET node_state         = c.to_state,
               external_ref       = c.external_ref,
               evidence           = coalesce(c.evidence, n.evidence),
               submitted_at       = $6,
               observe_started_at = CASE WHEN c.settled THEN NULL ELSE $6 END,
               next_observe_at    = CASE WHEN c.settled THEN NULL ELSE pacing.next_observe_at END,
               observe_phase      = CASE WHEN c.settled THEN NULL ELSE pacing.phase END,
               lease_until        = NULL,
               last_error         = NULL,
               finished_at        = CASE WHEN c.settled THEN $6 END,
               updated_at         = $6
          FROM checked c
         CROSS JOIN LATERAL observe_pacing(c.lane, $6, $6) pacing
         WHERE c.error_code IS NULL
           AND n.id = c.node_id
        RETURNING n.id
    ), intents AS (
        UPDATE node_intents t
           SET intent_state = 'SUBMITTED', external_ref = c.external_ref, finished_at = $6
          FROM checked c
         WHERE c.error_code IS NULL
           AND t.node_id = c.node_id
           AND t.claim_token = c.claim_token
    ), audited AS (
        INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
        SELECT $6, coalesce(c.claimed_by, session_user), 'node', c.node_id::text, c.request_id, 'state_changed',
               'SUBMITTING', c.to_state::text,
               jsonb_build_object('external_ref', c.external_ref, 'evidence', c.evidence)
          FROM checked c
          JOIN moved m ON m.id = c.node_id
         ORDER BY c.ord
    )
    SELECT array_agg(c.request_id ORDER BY c.ord),
           array_agg(c.claimed_by ORDER BY c.ord),
           array_agg(CASE WHEN c.error_code IS NULL THEN c.to_state END ORDER BY c.ord),
           array_agg(c.error_code ORDER BY c.ord),
           array_agg(c.error_message ORDER BY c.ord),
           -- the order of the DAG steps: by request, then node (the lock order)
           array_agg(c.ord::integer ORDER BY c.request_id, c.node_id) FILTER (WHERE c.error_code IS NULL)
      FROM checked c
    $sql$
    INTO v_requests, v_actors, v_states, v_codes, v_messages, v_order
    USING p_node_ids, p_claim_tokens, p_external_refs,
          coalesce(p_evidence, array_fill(NULL::jsonb, ARRAY[v_n])),
          coalesce(p_settled, array_fill(false, ARRAY[v_n])),
          v_now;

    -- the DAG step of the completed nodes (a SUBMITTED node takes none), set-based:
    -- for each request what finish_node does node by node in (request, node) order
    SELECT array_agg(p_node_ids[o.i] ORDER BY o.k), array_agg(v_requests[o.i] ORDER BY o.k),
           array_agg(v_actors[o.i] ORDER BY o.k)
      INTO v_done, v_done_requests, v_done_actors
      FROM unnest(coalesce(v_order, '{}')) WITH ORDINALITY AS o(i, k)
     WHERE v_states[o.i] = 'COMPLETED';
    IF v_done IS NOT NULL THEN
        EXECUTE $sql$
        WITH done AS (
            SELECT d.node_id, d.request_id, d.actor
              FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS d(node_id, request_id, actor)
        ), hits AS (
            -- each child's parents completed here; the last of them moves it, as one by one
            SELECT e.child_node_id AS child_id, count(*) AS parents_done, max(d.node_id) AS last_parent
              FROM done d
              JOIN movement_plan_edges e ON e.parent_node_id = d.node_id
             GROUP BY e.child_node_id
        ), children AS (
            UPDATE movement_request_nodes child
               SET pending_parents = child.pending_parents - h.parents_done,
                   node_state = CASE
                                    WHEN child.pending_parents > h.parents_done THEN 'PENDING'
                                    WHEN r.stop_reason IS NOT NULL THEN 'SKIPPED'
                                    ELSE 'READY'
                                END::qtg.node_state,
                   finished_at = CASE WHEN child.pending_parents = h.parents_done AND r.stop_reason IS NOT NULL
                                      THEN $4 END,
                   updated_at = $4
              FROM hits h, movement_requests r
             WHERE child.id = h.child_id
               AND child.node_state = 'PENDING'
               AND r.id = child.request_id
            RETURNING child.id, child.request_id, child.node_state, h.last_parent
        ), children_audited AS (
            INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
            SELECT $4, d.actor, 'node', c.id::text, c.request_id, 'state_changed', 'PENDING', c.node_state::text,
                   jsonb_build_object('parent_completed', c.last_parent)
              FROM children c
              JOIN done d ON d.node_id = c.last_parent
             WHERE c.node_state <> 'PENDING'
             ORDER BY c.last_parent, c.id
        ), counted AS (
            SELECT d.request_id, count(*) AS completed, max(d.node_id) AS last_node
              FROM done d
             GROUP BY d.request_id
        ), skipped AS (
            SELECT c.request_id, count(*) AS skipped
              FROM children c
             WHERE c.node_state = 'SKIPPED'
             GROUP BY c.request_id
        ), counters AS (
            UPDATE movement_requests r
               SET open_nodes = r.open_nodes - c.completed - coalesce(s.skipped, 0),
                   updated_at = $4
              FROM counted c
              LEFT JOIN skipped s ON s.request_id = c.request_id
             WHERE r.id = c.request_id
            RETURNING r.id, r.request_state, r.open_nodes, c.last_node
        )
        -- the requests with nothing open settle, each by the node that closed it
        SELECT (SELECT count(*) FROM children WHERE children.node_state = 'READY'),
               array_agg(q.id ORDER BY q.id),
               array_agg(d.actor ORDER BY q.id)
          FROM counters q
          JOIN done d ON d.node_id = q.last_node
         WHERE q.request_state = 'EXECUTING' AND q.open_nodes = 0
        $sql$
        INTO v_readied, v_settle, v_settle_actors
        USING v_done, v_done_requests, v_done_actors, v_now;

        IF v_readied > 0 THEN
            PERFORM notify_work('ready');
        END IF;
    END IF;
    IF v_settle IS NOT NULL THEN
        -- settle_request for each, set-based: the final state, its audit row and
        -- its callback (set_request_state, write_audit, enqueue_callback), with
        -- the callback's count of nodes by state
        EXECUTE $sql$
        WITH settling AS (
            SELECT s.id, s.actor
              FROM unnest($1::bigint[], $2::text[]) AS s(id, actor)
        ), counts AS (
            SELECT c.request_id, jsonb_object_agg(c.node_state, c.total) AS nodes
              FROM (SELECT n.request_id, n.node_state, count(*) AS total
                      FROM movement_request_nodes n
                     WHERE n.request_id IN (SELECT id FROM settling)
                     GROUP BY n.request_id, n.node_state) c
             GROUP BY c.request_id
        ), decided AS (
            SELECT r.id, s.actor,
                   CASE
                       WHEN r.failed_nodes > 0 THEN 'FAILED'
                       WHEN r.stop_reason IS NOT NULL THEN r.stop_reason
                       ELSE 'COMPLETED'
                   END::qtg.request_state AS final,
                   jsonb_build_object('failed_nodes', r.failed_nodes, 'stop_reason', r.stop_reason,
                                      'nodes', c.nodes) AS detail
              FROM settling s
              JOIN movement_requests r ON r.id = s.id
              JOIN counts c ON c.request_id = s.id
             WHERE r.request_state = 'EXECUTING' AND r.open_nodes = 0
        ), settled AS (
            UPDATE movement_requests r
               SET request_state = d.final, finished_at = $3, updated_at = $3
              FROM decided d
             WHERE r.id = d.id AND r.request_state = 'EXECUTING'
            RETURNING r.*, d.actor, d.detail
        ), audited AS (
            INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state,
                                      to_state, detail)
            SELECT $3, coalesce(q.actor, session_user), 'request', q.id::text, q.id, 'state_changed',
                   'EXECUTING', q.request_state::text, coalesce(q.detail, '{}')
              FROM settled q
             ORDER BY q.id
        )
        INSERT INTO callback_outbox (request_id, event_type, idempotency_key, target_url, payload,
                                     delivery_state, next_attempt_at, created_at)
        SELECT q.id,
               'movement.' || lower(q.request_state::text),
               format('%s-%s-%s', current_schema(), q.id, lower(q.request_state::text)),
               q.callback_url,
               jsonb_build_object(
                   'network', current_schema(),
                   'movement_id', q.id,
                   'external_id', q.external_id,
                   'from_state', 'EXECUTING'::qtg.request_state,
                   'to_state', q.request_state,
                   'amount', q.amount,
                   'asset', q.asset,
                   'occurred_at', $3,
                   'detail', coalesce(q.detail, '{}')),
               CASE WHEN q.callback_url IS NULL THEN 'NO_TARGET' ELSE 'PENDING' END,
               $3,
               $3
          FROM settled q
         ORDER BY q.id
        $sql$
        USING v_settle, v_settle_actors, v_now;
    END IF;

    RETURN QUERY
    SELECT u.node_id, u.node_state, u.error_code, u.error_message
      FROM unnest(p_node_ids, v_states, v_codes, v_messages) AS u(node_id, node_state, error_code, error_message);
END
$$;

COMMENT ON FUNCTION complete_submit_batch IS 'access: runner';
