-- claim_observe_batch: stage two of the observer's claim, for some advisory IDs
-- (observe_candidates) in one call: each ID claimed on its own, as the seed's
-- per-ID claim. SUBMITTED | OBSERVING stay as they are, and the claim writes
-- nothing: its locks hold the node until the transaction ends, and the secret
-- it hands the observer (complete_observe_batch's proof) is a MAC of the node,
-- its claim_token, the row version it locked and this transaction
-- (observe_claim_secret), good in this transaction only, while no one writes
-- the node (the report bumps the claim counter, claim_token).
-- A poll that finds nothing thus writes one version of the node: the report's.
--
-- For each ID, in id order (each once; NULLs are no node): every candidate
-- predicate (and the movement scope; a quarantined node is never claimed) is
-- repeated under FOR UPDATE OF movement_request_nodes, movement_requests SKIP
-- LOCKED, so a node that another observer holds, or whose request is locked
-- (a cancel in progress), or that no longer qualifies, is passed over.
-- PostgreSQL may lock the node tuple before SKIP LOCKED rejects the request
-- tuple; each lookup runs in its own subtransaction, rolled back on a miss, so
-- no stray node lock survives a miss. On a hit both locks stay with the
-- caller's transaction through the executor's observe() calls and
-- complete_observe_batch's commit.
-- At most 32 IDs a call (QT002 otherwise, and nothing is claimed): each hit
-- keeps its subtransaction's id until the commit, and a backend that holds
-- more than 64 of them makes every other session's snapshot check slower
-- (PostgreSQL's subtransaction cache overflows).
-- Plans: one per statement for the session (force_generic_plan): each reaches
-- its rows by primary key from the ids given; planned per call (PostgreSQL's
-- default for statements on an array), the claim took about 0.6 ms more. The
-- per-ID claim names the movement's key (the node's request_id, read first):
-- joined by the node alone, on statistics that thought no movement was
-- executing the plan read the EXECUTING movements in turn until it met the
-- node's, hundreds of rows a claim with hundreds in flight. (Not the read in
-- a subquery of its own that settle_movements uses: naming the key keeps the
-- seed's claim as written, one join locked FOR UPDATE OF both tables SKIP
-- LOCKED.)
-- Returns one row per node claimed, in id order; none when none qualifies.
CREATE OR REPLACE FUNCTION claim_observe_batch(
    p_node_ids    bigint[],
    p_worker      text,
    p_movement_id bigint DEFAULT NULL
)
RETURNS TABLE (
    node_id            bigint,
    request_id         bigint,
    claim_secret       text,
    node_key           text,
    executor_key       text,
    node_config        jsonb,
    lane               text,
    external_ref       text,
    observe_started_at timestamptz,
    observe_count      integer,
    amount             numeric,
    asset              text,
    intent             jsonb
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_id      bigint;
    v_node    bigint;
    v_claimed bigint[] := '{}';
BEGIN
    PERFORM check_read_committed('claim_observe_batch');
    PERFORM check_worker('claim_observe', p_worker);
    IF coalesce(cardinality(p_node_ids), 0) > 32 THEN
        RAISE EXCEPTION 'claim_observe_batch: at most 32 node ids a call, got %', cardinality(p_node_ids)
            USING ERRCODE = 'QT002', HINT = 'Claim the candidates in batches of at most 32.';
    END IF;

    FOR v_id IN SELECT DISTINCT u.id FROM unnest(p_node_ids) AS u(id) WHERE u.id IS NOT NULL ORDER BY u.id LOOP
        BEGIN
            SELECT movement_request_nodes.id INTO v_node
              FROM movement_request_nodes
              JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
             WHERE movement_request_nodes.id = v_id
               AND movement_requests.id = (SELECT node.request_id FROM movement_request_nodes node
                                            WHERE node.id = v_id)
               AND node_state IN ('SUBMITTED', 'OBSERVING')
               AND quarantined_at IS NULL
               AND movement_requests.request_state = 'EXECUTING'
               AND (next_observe_at IS NULL OR next_observe_at <= v_now)
               AND (p_movement_id IS NULL OR movement_requests.id = p_movement_id)
               FOR UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'QT099';   -- undo any partial tuple lock
            END IF;
            v_claimed := v_claimed || v_node;
        EXCEPTION WHEN SQLSTATE 'QT099' THEN
            NULL;
        END;
    END LOOP;
    IF cardinality(v_claimed) = 0 THEN
        RETURN;
    END IF;

    -- the claim writes nothing: the locks above are its hold, and the secret
    -- proves this transaction's claim at the node's claim_token
    RETURN QUERY
    SELECT node.id, node.request_id,
           observe_claim_secret(node.id, node.claim_token, node.xmin, pg_current_xact_id()),
           node.node_key, node.executor_key, node.node_config, node.lane, node.external_ref,
           node.observe_started_at, node.observe_count, request.amount, request.asset,
           intent_document(node.id)
      FROM movement_request_nodes node
      JOIN movement_requests request ON request.id = node.request_id
     WHERE node.id = ANY (v_claimed)
     ORDER BY node.id;
END
$$;
