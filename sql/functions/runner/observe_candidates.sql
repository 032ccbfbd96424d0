-- observe_candidates: the observer's advisory, unlocked ID list (stage one of
-- the seed's two-stage claim). Nodes SUBMITTED or OBSERVING whose
-- next_observe_at has come (none quarantined), in EXECUTING requests, oldest
-- request first; optionally scoped to one movement. Nothing is locked: every ID must still
-- pass claim_observe, which repeats each predicate under lock.
CREATE OR REPLACE FUNCTION observe_candidates(p_max integer DEFAULT 50, p_movement_id bigint DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    v_now timestamptz := clock();
BEGIN
    PERFORM check_args('observe_candidates', p_max => p_max, p_max_limit => 1000);
    RETURN QUERY
    SELECT movement_request_nodes.id
      FROM movement_request_nodes
      JOIN movement_requests ON movement_requests.id = movement_request_nodes.request_id
     WHERE node_state IN ('SUBMITTED', 'OBSERVING')
       AND quarantined_at IS NULL
       AND movement_requests.request_state = 'EXECUTING'
       AND (next_observe_at IS NULL OR next_observe_at <= v_now)
       AND (p_movement_id IS NULL OR movement_requests.id = p_movement_id)
     ORDER BY movement_requests.created_at
     LIMIT p_max;
END
$$;
