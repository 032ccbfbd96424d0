-- start_movement_rows: the one place movements start. Internal.
-- Takes up to p_max APPROVED movements with FOR UPDATE SKIP LOCKED (several
-- dispatchers may start at once), highest priority first, and moves them
-- APPROVED -> EXECUTING through set_movement_states (an audit event and a
-- movement.executing callback each). Their root nodes (PENDING, no parent to
-- wait for) are locked and returned still PENDING, with their PENDING -> READY
-- audit events in order (readied): the caller writes those events and moves
-- every root on in the same transaction, to READY (start_approved_movements)
-- or, for the roots it claims at once, straight to SUBMITTING
-- (claim_ready_nodes), so that a root is written once either way. A root the
-- caller leaves PENDING would never run: both callers move all of them.
-- Locks: the movements in priority order, then their roots in id order.
CREATE OR REPLACE FUNCTION start_movement_rows(
    p_max       integer,
    p_actor     text,
    OUT started integer,
    OUT roots   bigint[],
    OUT readied qtg.audit_event[]
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    SELECT array_agg(picked.id ORDER BY picked.priority DESC, picked.id) INTO v_ids
      FROM (SELECT id, priority
              FROM movement_requests
             WHERE request_state = 'APPROVED'
             ORDER BY priority DESC, id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED) picked;
    started := coalesce(cardinality(v_ids), 0);
    IF started = 0 THEN
        RETURN;
    END IF;

    PERFORM set_movement_states(v_ids, 'APPROVED', array_fill('EXECUTING'::qtg.request_state, ARRAY[started]),
                                array_fill(p_actor, ARRAY[started]));
    SELECT array_agg(root.id ORDER BY root.request_id, root.id),
           array_agg((p_actor, 'node', root.id::text, root.request_id, 'state_changed', 'PENDING', 'READY',
                      '{"root": true}'::jsonb)::qtg.audit_event ORDER BY root.request_id, root.id)
      INTO roots, readied
      FROM (SELECT node.id, node.request_id
              FROM movement_request_nodes node
             WHERE node.request_id = ANY (v_ids)
               AND node.node_state = 'PENDING'
               AND node.pending_parents = 0
             ORDER BY node.id
               FOR UPDATE) root;
END
$$;
