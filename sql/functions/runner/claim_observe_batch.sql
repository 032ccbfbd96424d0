-- claim_observe_batch: stage two of the observer's claim, for some advisory IDs
-- (observe_candidates) in one call: each ID claimed on its own, as the seed's
-- per-ID claim. SUBMITTED | OBSERVING stay as they are; each claim hands the
-- observer a new claim secret (complete_observe_batch's proof; the node keeps
-- its claim_hash) and bumps the claim counter (claim_token).
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

    RETURN QUERY
    WITH fresh AS (
        SELECT u.id, claim_secret() AS secret
          FROM unnest(v_claimed) AS u(id)
    ), claimed AS (
        UPDATE movement_request_nodes node
           SET claim_token = node.claim_token + 1,
               claim_hash  = claim_hash(fresh.secret),
               claimed_by  = p_worker,
               claimed_at  = v_now
          FROM fresh
         WHERE node.id = fresh.id
        RETURNING node.*, fresh.secret
    )
    SELECT claimed.id, claimed.request_id, claimed.secret, claimed.node_key, claimed.executor_key,
           claimed.node_config, claimed.lane, claimed.external_ref, claimed.observe_started_at,
           claimed.observe_count, request.amount, request.asset,
           intent_document(claimed.id)
      FROM claimed
      JOIN movement_requests request ON request.id = claimed.request_id
     ORDER BY claimed.id;
END
$$;
