-- reopen_after_retry: what a FAILED node's retry (requeue_node) reopens,
-- the node itself READY already: each descendant its failure SKIPPED is
-- PENDING again, waiting for its parents not COMPLETED (the retried node and
-- the reopened descendants among them); its movement counts the node and
-- them open again and the failure no more, and a FAILED movement is
-- EXECUTING again (its finished_at cleared, started_at kept); the rows
-- the pipeline roll-up counted finished are uncounted and listed open again
-- (pipeline_rollups' lock taken, as roll_up_pipeline_counts takes it, so the
-- two never count one row twice). Audited: each
-- descendant SKIPPED -> PENDING (ancestor_retried) and the movement FAILED
-- -> EXECUTING (retried_node, and retried_nodes: p_together, the nodes of
-- the retry; reopened_nodes: the node and the steps this call reopened), by
-- p_actor, and its receiver told
-- (enqueue_callbacks: movement.executing, its key ending -retryN). The
-- caller holds the movement's and the node's locks, and retries every
-- FAILED node of the movement, each READY before the first is reopened (so
-- every SKIPPED descendant was skipped for one of them, and waits for each
-- of its parents not COMPLETED).
-- Locks: the descendants, in id order; then pipeline_rollups.
CREATE OR REPLACE FUNCTION reopen_after_retry(p_node_id bigint, p_request_id bigint, p_actor text,
                                              p_together bigint[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock();
    v_reopened integer;
    v_ids      bigint[];
    v_state    qtg.request_state;
    v_counted  record;
    v_together jsonb := to_jsonb(coalesce(p_together, ARRAY[p_node_id]));
BEGIN
    WITH RECURSIVE below(node_id) AS (
        SELECT e.child_node_id FROM movement_plan_edges e WHERE e.parent_node_id = p_node_id
        UNION
        SELECT e.child_node_id FROM below b JOIN movement_plan_edges e ON e.parent_node_id = b.node_id
    ), locked AS (
        SELECT node.id FROM movement_request_nodes node
         WHERE node.id IN (SELECT node_id FROM below) AND node.node_state = 'SKIPPED'
         ORDER BY node.id
           FOR UPDATE
    ), reopened AS (
        UPDATE movement_request_nodes node
           SET node_state      = 'PENDING',
               finished_at     = NULL,
               pending_parents = (SELECT count(*) FROM movement_plan_edges e
                                    JOIN movement_request_nodes parent ON parent.id = e.parent_node_id
                                   WHERE e.child_node_id = node.id AND parent.node_state <> 'COMPLETED'),
               updated_at      = v_now
          FROM locked
         WHERE node.id = locked.id
        RETURNING node.id
    ), audited AS (
        SELECT write_audit(array_agg((p_actor, 'node', r.id::text, p_request_id, 'state_changed', 'SKIPPED',
                                      'PENDING', jsonb_build_object('ancestor_retried', p_node_id)
                                     )::qtg.audit_event ORDER BY r.id))
          FROM reopened r
    )
    SELECT count(*), coalesce(array_agg(r.id), '{}') INTO v_reopened, v_ids FROM reopened r, audited;

    SELECT r.request_state INTO v_state FROM movement_requests r WHERE r.id = p_request_id;
    UPDATE movement_requests r
       SET request_state = 'EXECUTING',
           finished_at   = NULL,
           open_nodes    = r.open_nodes + 1 + v_reopened,
           failed_nodes  = r.failed_nodes - 1,
           updated_at    = v_now
     WHERE r.id = p_request_id;
    -- what the pipeline roll-up counted finished: uncounted, and open again
    PERFORM 1 FROM pipeline_rollups r ORDER BY r.entity FOR UPDATE;
    FOR v_counted IN
        SELECT x.entity, x.state, array_agg(x.id) AS ids, count(*) AS n
          FROM (SELECT 'node' AS entity, p_node_id AS id, 'FAILED' AS state
                UNION ALL
                SELECT 'node', u.id, 'SKIPPED' FROM unnest(v_ids) AS u(id)
                UNION ALL
                SELECT 'movement', p_request_id, 'FAILED' WHERE v_state = 'FAILED') x
          JOIN pipeline_rollups r ON r.entity = x.entity
         WHERE x.id < r.below_id AND x.id <> ALL (r.open_ids)
         GROUP BY x.entity, x.state
    LOOP
        DELETE FROM pipeline_rollup_totals t
         WHERE t.entity = v_counted.entity AND t.state = v_counted.state AND t.total <= v_counted.n;
        UPDATE pipeline_rollup_totals t SET total = t.total - v_counted.n
         WHERE t.entity = v_counted.entity AND t.state = v_counted.state;
        UPDATE pipeline_rollups r
           SET open_ids = ARRAY(SELECT DISTINCT u.id FROM unnest(r.open_ids || v_counted.ids) AS u(id) ORDER BY u.id)
         WHERE r.entity = v_counted.entity;
    END LOOP;

    IF v_state = 'FAILED' THEN
        PERFORM write_audit(ARRAY[(p_actor, 'request', p_request_id::text, p_request_id, 'state_changed', 'FAILED',
                                   'EXECUTING', jsonb_build_object('retried_node', p_node_id,
                                                                   'retried_nodes', v_together,
                                                                   'reopened_nodes', v_reopened + 1)
                                  )::qtg.audit_event]);
        -- its receiver, told FAILED, is told it runs again
        PERFORM enqueue_callbacks(ARRAY[p_request_id], ARRAY['FAILED'::qtg.request_state],
                                  ARRAY[jsonb_build_object('retried_node', p_node_id,
                                                           'retried_nodes', v_together)]);
    END IF;
END
$$;
