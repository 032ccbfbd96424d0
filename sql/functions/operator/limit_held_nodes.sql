-- limit_held_nodes: the READY nodes a value limit or a tripped breaker holds
-- now, in the order a claim would take them, each with why (limit_holds, as
-- the claim decides it). A function rather than a view: it runs the claim's
-- own rule, which is internal.
CREATE OR REPLACE FUNCTION limit_held_nodes()
RETURNS TABLE (node_id bigint, movement_id bigint, node_key text, lane text, executor_key text, reason text)
LANGUAGE sql STABLE
AS $$
    SELECT n.id, n.request_id, n.node_key, n.lane, n.executor_key, h.reason
      FROM limit_holds(ARRAY(SELECT r.id FROM movement_request_nodes r
                              WHERE r.node_state = 'READY' AND r.quarantined_at IS NULL
                              ORDER BY r.priority DESC, r.id), clock()) h
      JOIN movement_request_nodes n ON n.id = h.node_id
     ORDER BY n.priority DESC, n.id;
$$;
