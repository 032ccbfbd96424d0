-- claim_observe: stage two of the observer's claim, for one advisory ID: one
-- node of claim_observe_batch, which holds the rules (every candidate predicate
-- repeated under FOR UPDATE OF movement_request_nodes, movement_requests SKIP
-- LOCKED, in a subtransaction rolled back on a miss, so no stray node lock
-- survives it). SUBMITTED | OBSERVING stay as they are and the claim writes
-- nothing; it hands the observer a secret (complete_observe's proof) good in
-- this transaction only, until the report bumps the claim counter
-- (claim_token). No row when the node
-- no longer qualifies or another session holds it or its request. On a hit,
-- both locks stay with the caller's transaction through the executor's
-- observe() and complete_observe()'s commit.
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
LANGUAGE sql
AS $$
    SELECT * FROM claim_observe_batch(ARRAY[p_node_id], p_worker, p_movement_id);
$$;
