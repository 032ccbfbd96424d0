-- start_approved_movements: APPROVED -> EXECUTING; root nodes PENDING -> READY.
-- Claims up to p_max approved requests with FOR UPDATE SKIP LOCKED (several
-- dispatchers may call it at once), highest priority first, and starts them
-- set-based: the movements through set_movement_states (an audit row and a
-- callback each), then their root nodes, audited. Locks: the requests, then
-- their root nodes. p_actor, the worker's name, is the audit rows' actor
-- (given, within engine_limits: QT002/QT005). Returns the number of movements
-- started.
CREATE OR REPLACE FUNCTION start_approved_movements(p_max integer DEFAULT 100, p_actor text DEFAULT 'node_dispatcher')
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock();
    v_ids bigint[];
    v_n   integer;
BEGIN
    PERFORM check_args('start_approved_movements', p_max => p_max, p_max_limit => 10000);
    PERFORM check_worker('start_approved_movements', p_actor);

    SELECT array_agg(picked.id ORDER BY picked.priority DESC, picked.id) INTO v_ids
      FROM (SELECT id, priority
              FROM movement_requests
             WHERE request_state = 'APPROVED'
             ORDER BY priority DESC, id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED) picked;
    v_n := coalesce(cardinality(v_ids), 0);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;

    PERFORM set_movement_states(v_ids, 'APPROVED', array_fill('EXECUTING'::qtg.request_state, ARRAY[v_n]),
                                array_fill(p_actor, ARRAY[v_n]));
    WITH roots AS (
        UPDATE movement_request_nodes node
           SET node_state = 'READY', updated_at = v_now
         WHERE node.request_id = ANY (v_ids)
           AND node.node_state = 'PENDING'
           AND node.pending_parents = 0
        RETURNING node.id, node.request_id
    )
    SELECT write_audit(array_agg((p_actor, 'node', roots.id::text, roots.request_id, 'state_changed', 'PENDING',
                                  'READY', '{"root": true}'::jsonb)::qtg.audit_event
                                 ORDER BY roots.request_id, roots.id))
      INTO v_n
      FROM roots;

    PERFORM notify_work('ready');
    RETURN cardinality(v_ids);
END
$$;
