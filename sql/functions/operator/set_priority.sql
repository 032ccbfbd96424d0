-- set_priority: PENDING_APPROVAL | APPROVED | EXECUTING -> the same state, with
-- a new priority: the movement's (movement_requests.priority, the order in
-- which APPROVED movements start) and that of each of its nodes not yet
-- finished (movement_request_nodes.priority, the order in which READY nodes
-- are claimed: claim_ready_nodes takes priority DESC, id through
-- movement_request_nodes_ready_idx). A finished node keeps the priority it ran
-- with. One operator (session_user), with a reason; audited 'priority_set'
-- (entity request, from and to the priority, the reason and the nodes set).
-- A priority is any integer, the bounds create_movement takes (the type's:
-- PostgreSQL refuses a value beyond it before the call).
-- The same priority again writes nothing and answers it.
-- Refused (nothing changes): QT002 no priority, or no reason; QT005 a reason
-- beyond engine_limits; QT010 no such movement; QT020 the movement finished
-- (COMPLETED, FAILED, CANCELLED, EXPIRED).
-- A node's updated_at is left as it is (stuck_nodes reads it as the time the
-- node has waited in its state). Returns the movement's priority.
-- Locks: the request, then its unfinished nodes in id order (waits for a
-- dispatcher mid-claim, as cancel does).
CREATE OR REPLACE FUNCTION set_priority(p_movement_id bigint, p_priority integer, p_reason text)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_actor   text := session_user;
    v_request movement_requests;
    v_nodes   bigint;
BEGIN
    IF p_priority IS NULL THEN
        RAISE EXCEPTION 'set_priority needs a priority' USING ERRCODE = 'QT002',
            HINT = 'Give a whole number: the higher, the sooner its READY nodes are claimed (0 is the default).';
    END IF;
    PERFORM check_reason('set_priority', p_reason,
                         'Say why the movement should go before or after the others, e.g. a payment due at noon.');

    SELECT * INTO v_request FROM movement_requests WHERE id = p_movement_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'movement % does not exist', p_movement_id USING ERRCODE = 'QT010',
            HINT = 'Check the movement id and the network (schema) you are connected to.';
    END IF;
    IF v_request.request_state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'EXPIRED') THEN
        RAISE EXCEPTION 'movement % is %: a finished movement has no priority to change',
                        p_movement_id, v_request.request_state
            USING ERRCODE = 'QT020', HINT = 'Only a movement waiting for approval, approved or executing can be reprioritised.';
    END IF;
    IF v_request.priority = p_priority THEN
        RETURN p_priority;  -- as asked already: nothing written
    END IF;

    PERFORM 1 FROM movement_request_nodes node
     WHERE node.request_id = p_movement_id AND node.finished_at IS NULL
     ORDER BY node.id
       FOR UPDATE;
    UPDATE movement_request_nodes node
       SET priority = p_priority
     WHERE node.request_id = p_movement_id
       AND node.finished_at IS NULL
       AND node.priority IS DISTINCT FROM p_priority;
    GET DIAGNOSTICS v_nodes = ROW_COUNT;

    UPDATE movement_requests SET priority = p_priority, updated_at = v_now WHERE id = p_movement_id;
    PERFORM write_audit(ARRAY[(v_actor, 'request', p_movement_id::text, p_movement_id, 'priority_set',
                               v_request.priority::text, p_priority::text,
                               jsonb_build_object('reason', p_reason, 'state', v_request.request_state,
                                                  'nodes', v_nodes)
                              )::qtg.audit_event]);
    RETURN p_priority;
END
$$;
