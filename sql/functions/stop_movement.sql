-- stop_movement: the shared body of cancel and expiry. Internal.
-- PENDING_APPROVAL | APPROVED -> p_reason at once; EXECUTING -> stop requested,
-- PENDING/READY nodes SKIPPED, the request settles when nothing is in flight.
-- Locks: the request, then its nodes.
CREATE OR REPLACE FUNCTION stop_movement(
    p_movement_id bigint,
    p_reason      qtg.request_state,
    p_actor       text,
    p_detail      text
) RETURNS qtg.request_state
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_request movement_requests;
    v_skipped integer;
BEGIN
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

    WITH targets AS (
        SELECT id, node_state AS was
          FROM movement_request_nodes
         WHERE request_id = p_movement_id
           AND node_state IN ('PENDING', 'READY')
    ), skipped AS (
        UPDATE movement_request_nodes node
           SET node_state = 'SKIPPED', finished_at = v_now, updated_at = v_now
          FROM targets
         WHERE node.id = targets.id
        RETURNING node.id, targets.was
    ), audited AS (
        INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
        SELECT v_now, p_actor, 'node', id::text, p_movement_id, 'state_changed', was::text, 'SKIPPED',
               jsonb_build_object('stopped', p_reason)
          FROM skipped
        RETURNING 1
    )
    SELECT count(*) INTO v_skipped FROM audited;

    UPDATE movement_requests
       SET open_nodes = open_nodes - v_skipped,
           stop_reason = p_reason,
           stop_detail = p_detail,
           updated_at = v_now
     WHERE id = p_movement_id;

    PERFORM write_audit(p_actor, 'request', p_movement_id::text, p_movement_id, 'stop_requested',
                        v_request.request_state::text, p_reason::text,
                        jsonb_build_object('reason', p_detail, 'skipped_nodes', v_skipped));

    IF v_request.request_state = 'EXECUTING' THEN
        RETURN settle_request(p_movement_id, p_actor);
    END IF;
    PERFORM set_request_state(p_movement_id, v_request.request_state, p_reason, p_actor,
                              jsonb_build_object('reason', p_detail));
    RETURN p_reason;
END
$$;
