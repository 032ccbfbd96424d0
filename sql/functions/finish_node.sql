-- finish_node: the DAG step after a node reached COMPLETED or FAILED. Internal;
-- the caller has already moved the node (from-state guarded) and holds the
-- request lock, then the node lock.
--
--   COMPLETED: each PENDING child loses one pending parent; a child reaching 0
--              becomes READY, or SKIPPED when the request has a stop requested.
--              Only this node's edges are read: no scan of history.
--   FAILED:    every PENDING descendant is SKIPPED (it can no longer run).
--
-- The request's open_nodes/failed_nodes counters move with the nodes, and the
-- request settles when nothing is open. Returns the request's state afterwards.
CREATE OR REPLACE FUNCTION finish_node(
    p_node_id    bigint,
    p_request_id bigint,
    p_outcome    qtg.node_state,
    p_actor      text
) RETURNS qtg.request_state
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_stopping boolean;
    v_skipped  integer := 0;
    v_readied  integer := 0;
BEGIN
    SELECT stop_reason IS NOT NULL INTO STRICT v_stopping FROM movement_requests WHERE id = p_request_id;

    IF p_outcome = 'COMPLETED' THEN
        WITH children AS (
            UPDATE movement_request_nodes child
               SET pending_parents = child.pending_parents - 1,
                   node_state = CASE
                                    WHEN child.pending_parents > 1 THEN 'PENDING'
                                    WHEN v_stopping THEN 'SKIPPED'
                                    ELSE 'READY'
                                END::qtg.node_state,
                   finished_at = CASE WHEN child.pending_parents = 1 AND v_stopping THEN v_now END,
                   updated_at = v_now
              FROM movement_plan_edges edge
             WHERE edge.parent_node_id = p_node_id
               AND child.id = edge.child_node_id
               AND child.node_state = 'PENDING'
            RETURNING child.id, child.node_state
        ), audited AS (
            INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
            SELECT v_now, p_actor, 'node', id::text, p_request_id, 'state_changed', 'PENDING', node_state::text,
                   jsonb_build_object('parent_completed', p_node_id)
              FROM children
             WHERE node_state <> 'PENDING'
            RETURNING to_state
        )
        SELECT count(*) FILTER (WHERE to_state = 'READY'), count(*) FILTER (WHERE to_state = 'SKIPPED')
          INTO v_readied, v_skipped
          FROM audited;
    ELSIF p_outcome = 'FAILED' THEN
        WITH RECURSIVE descendants(id) AS (
            SELECT child_node_id FROM movement_plan_edges WHERE parent_node_id = p_node_id
            UNION
            SELECT edge.child_node_id
              FROM descendants JOIN movement_plan_edges edge ON edge.parent_node_id = descendants.id
        ), skipped AS (
            UPDATE movement_request_nodes node
               SET node_state = 'SKIPPED', finished_at = v_now, updated_at = v_now
              FROM descendants
             WHERE node.id = descendants.id
               AND node.node_state = 'PENDING'
            RETURNING node.id
        ), audited AS (
            INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
            SELECT v_now, p_actor, 'node', id::text, p_request_id, 'state_changed', 'PENDING', 'SKIPPED',
                   jsonb_build_object('ancestor_failed', p_node_id)
              FROM skipped
            RETURNING 1
        )
        SELECT count(*) INTO v_skipped FROM audited;
    ELSE
        RAISE EXCEPTION 'finish_node: % is not a finishing outcome', p_outcome USING ERRCODE = 'QT002';
    END IF;

    UPDATE movement_requests
       SET open_nodes   = open_nodes - 1 - v_skipped,
           failed_nodes = failed_nodes + (p_outcome = 'FAILED')::int,
           updated_at   = v_now
     WHERE id = p_request_id;

    IF v_readied > 0 THEN
        PERFORM notify_work('ready');
    END IF;
    RETURN settle_request(p_request_id, p_actor);
END
$$;
