-- claim_observe: stage two of the observer's claim, for one advisory ID.
-- SUBMITTED | OBSERVING stay as they are; the claim hands the observer a new
-- claim secret (complete_observe's proof; the node keeps its claim_hash) and
-- bumps the claim counter (claim_token).
--
-- Repeats every candidate predicate (and the movement scope; a quarantined node
-- is never claimed) under
-- FOR UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED, so a
-- node that another observer holds, or whose request is locked (a cancel in
-- progress), or that no longer qualifies, returns no row. PostgreSQL may lock
-- the node tuple before SKIP LOCKED rejects the request tuple; the lookup runs
-- in its own subtransaction that is rolled back on a miss, so no stray node
-- lock survives a miss, even when the caller does not wrap the call in a
-- savepoint as the runner does. On a hit, both locks stay with the caller's
-- transaction through the executor's observe() and complete_observe()'s commit.
CREATE OR REPLACE FUNCTION claim_observe(p_node_id bigint, p_worker text, p_movement_id bigint DEFAULT NULL)
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
AS $$
DECLARE
    v_now  timestamptz := clock();
    v_node bigint;
BEGIN
    PERFORM check_worker('claim_observe', p_worker);

    BEGIN
        SELECT movement_request_nodes.id INTO v_node
          FROM movement_request_nodes
          JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
         WHERE movement_request_nodes.id = p_node_id
           AND node_state IN ('SUBMITTED', 'OBSERVING')
           AND quarantined_at IS NULL
           AND movement_requests.request_state = 'EXECUTING'
           AND (next_observe_at IS NULL OR next_observe_at <= v_now)
           AND (p_movement_id IS NULL OR movement_requests.id = p_movement_id)
           FOR UPDATE OF movement_request_nodes, movement_requests SKIP LOCKED;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'QT099';   -- undo any partial tuple lock
        END IF;
    EXCEPTION WHEN SQLSTATE 'QT099' THEN
        RETURN;
    END;

    RETURN QUERY
    WITH fresh AS (
        SELECT claim_secret() AS secret
    ), claimed AS (
        UPDATE movement_request_nodes node
           SET claim_token = node.claim_token + 1,
               claim_hash  = claim_hash(fresh.secret),
               claimed_by  = p_worker,
               claimed_at  = v_now
          FROM fresh
         WHERE node.id = v_node
        RETURNING node.*, fresh.secret
    )
    SELECT claimed.id, claimed.request_id, claimed.secret, claimed.node_key, claimed.executor_key,
           claimed.node_config, claimed.lane, claimed.external_ref, claimed.observe_started_at,
           claimed.observe_count, request.amount, request.asset,
           intent_document(claimed.id)
      FROM claimed
      JOIN movement_requests request ON request.id = claimed.request_id;
END
$$;
