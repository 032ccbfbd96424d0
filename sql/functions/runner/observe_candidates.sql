-- observe_candidates: the observer's advisory, unlocked ID list (stage one of
-- the seed's two-stage claim). Nodes SUBMITTED or OBSERVING whose
-- next_observe_at has come (none quarantined), in EXECUTING requests, the
-- longest overdue first (next_observe_at, then id); optionally scoped to one
-- movement. Nothing is locked: every ID must still pass claim_observe, which
-- repeats each predicate under lock.
--
-- The order is the observable index's (movement_request_nodes_observable_idx,
-- next_observe_at over the nodes in flight): the unscoped list reads the due
-- end of that index and stops after p_max rows, so its cost does not grow
-- with the nodes in flight nor with how many are due (benchmark case 6). It
-- was the oldest request first, which sorted every due node on each call;
-- longest overdue first also keeps a backlog of old movements from starving
-- the observations of newer ones. next_observe_at is never NULL in these
-- states (a table CHECK), so the range is an index bound, not a filter.
-- The plan is generic (one plan whatever the clock and p_max); a custom plan
-- was made again on every call, which cost more than the scan once 100,000
-- nodes were in flight. The movement's state is read by a subquery on its key
-- for each node the scan yields, not joined: as a join the planner chose its
-- order from the statistics, and on some it read every due node (a bitmap
-- scan: enable_bitmapscan off), or sorted them to merge them with the
-- EXECUTING movements (case 3 of the benchmarks at 100,000 finished nodes,
-- 0.37 ms against 0.19), or, with the movements' statistics taken before the
-- work in flight was made (the planner thought no movement was executing),
-- read every EXECUTING movement's nodes and sorted them: a cost that grows
-- with the work in flight. The subquery leaves the planner one order: the
-- index's, stopping after p_max.
CREATE OR REPLACE FUNCTION observe_candidates(p_max integer DEFAULT 50, p_movement_id bigint DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
AS $$
DECLARE
    v_now timestamptz := clock();
BEGIN
    PERFORM check_args('observe_candidates', p_max => p_max, p_max_limit => 1000);
    IF p_movement_id IS NULL THEN
        RETURN QUERY
        SELECT node.id
          FROM movement_request_nodes node
         WHERE node.node_state IN ('SUBMITTED', 'OBSERVING')
           AND node.quarantined_at IS NULL
           AND node.next_observe_at <= v_now
           AND (SELECT movement.request_state FROM movement_requests movement
                 WHERE movement.id = node.request_id) = 'EXECUTING'
         ORDER BY node.next_observe_at, node.id
         LIMIT p_max;
    ELSE
        RETURN QUERY
        SELECT node.id
          FROM movement_request_nodes node
         WHERE node.request_id = p_movement_id
           AND node.node_state IN ('SUBMITTED', 'OBSERVING')
           AND node.quarantined_at IS NULL
           AND node.next_observe_at <= v_now
           AND (SELECT movement.request_state FROM movement_requests movement
                 WHERE movement.id = node.request_id) = 'EXECUTING'
         ORDER BY node.next_observe_at, node.id
         LIMIT p_max;
    END IF;
END
$$;
