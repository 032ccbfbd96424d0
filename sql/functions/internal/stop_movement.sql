-- stop_movement: the shared body of cancel and expiry. Internal.
-- PENDING_APPROVAL | APPROVED -> p_reason at once; EXECUTING -> stop requested,
-- PENDING/READY nodes SKIPPED, the request settles when nothing is in flight.
-- A reason (p_detail) beyond engine_limits is refused (QT005).
-- Locks: the request, then its nodes.
CREATE OR REPLACE FUNCTION stop_movement(
    p_movement_id bigint,
    p_reason      qtg.request_state,
    p_actor       text,
    p_detail      text
) RETURNS qtg.request_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_request movement_requests;
    v_skipped bigint[];
BEGIN
    PERFORM check_limits(CASE p_reason WHEN 'CANCELLED' THEN 'cancel_movement' ELSE 'expire_movements' END,
                         p_text => ARRAY[p_detail]);
    SELECT * INTO v_request FROM movement_requests WHERE id = p_movement_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'movement % does not exist', p_movement_id USING ERRCODE = 'QT010',
            HINT = 'Check the movement id and the network (schema) you are connected to.';
    END IF;
    -- asking again for a stop already requested (or done) changes nothing; a
    -- movement that ended otherwise (a node failed meanwhile) is terminal: QT020
    IF v_request.stop_reason = p_reason AND v_request.request_state IN ('EXECUTING', p_reason) THEN
        RETURN v_request.request_state;
    END IF;
    IF v_request.request_state NOT IN ('PENDING_APPROVAL', 'APPROVED', 'EXECUTING') OR v_request.stop_reason IS NOT NULL THEN
        RAISE EXCEPTION 'movement % is % (stop requested: %), it cannot be %',
                        p_movement_id, v_request.request_state, coalesce(v_request.stop_reason::text, 'no'),
                        lower(p_reason::text)
            USING ERRCODE = 'QT020';
    END IF;

    PERFORM 1 FROM movement_request_nodes WHERE request_id = p_movement_id ORDER BY id FOR UPDATE;

    WITH skipped AS (
        UPDATE movement_request_nodes node
           SET node_state = 'SKIPPED', finished_at = v_now, updated_at = v_now
          FROM movement_request_nodes was
         WHERE was.id = node.id
           AND node.request_id = p_movement_id
           AND node.node_state IN ('PENDING', 'READY')
        RETURNING node.id, was.node_state AS was
    ), audited AS (
        SELECT write_audit(array_agg((p_actor, 'node', s.id::text, p_movement_id, 'state_changed', s.was::text,
                                      'SKIPPED', jsonb_build_object('stopped', p_reason))::qtg.audit_event
                                     ORDER BY s.id))
          FROM skipped s
    )
    SELECT coalesce(array_agg(s.id ORDER BY s.id), '{}') INTO v_skipped FROM skipped s, audited;

    UPDATE movement_requests
       SET stop_reason = p_reason, stop_detail = p_detail, updated_at = v_now
     WHERE id = p_movement_id;
    PERFORM write_audit(ARRAY[(p_actor, 'request', p_movement_id::text, p_movement_id, 'stop_requested',
                               v_request.request_state::text, p_reason::text,
                               jsonb_build_object('reason', p_detail, 'skipped_nodes', cardinality(v_skipped))
                              )::qtg.audit_event]);

    -- the skipped nodes are closed; an EXECUTING movement with nothing in flight settles
    PERFORM finish_nodes(v_skipped, array_fill(p_actor, ARRAY[cardinality(v_skipped)]));
    IF v_request.request_state = 'EXECUTING' THEN
        SELECT request_state INTO STRICT v_request.request_state FROM movement_requests WHERE id = p_movement_id;
        RETURN v_request.request_state;
    END IF;
    PERFORM set_movement_states(ARRAY[p_movement_id], v_request.request_state, ARRAY[p_reason], ARRAY[p_actor],
                                ARRAY[jsonb_build_object('reason', p_detail)]);
    RETURN p_reason;
END
$$;
