-- release_quarantine: a quarantined node goes back into circulation, in the
-- state it was quarantined in, on one operator's word (session_user), with a
-- reason. The node's lost claims count from 0 again, and it is due at once:
-- READY for a dispatcher, SUBMITTING or UNKNOWN for recovery (which concludes
-- from evidence: a prepared side effect is only ever resubmitted as it is),
-- SUBMITTED or OBSERVING for the observer. One operator suffices: releasing
-- gives a node no new side effect and weakens no rule (a fresh payload still
-- takes requeue_node and two logins); at worst the node breaks a worker again
-- and is quarantined again. Audited 'quarantine_released' with the reason and
-- the quarantine it ends.
-- Refused (nothing changes): QT002 no reason; QT005 a reason beyond
-- engine_limits; QT011 no such node; QT021 the node is not quarantined, or has
-- finished. Locks: request, node.
CREATE OR REPLACE FUNCTION release_quarantine(p_node_id bigint, p_reason text) RETURNS qtg.node_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_now        timestamptz := clock();
    v_actor      text := session_user;
    v_request_id bigint;
    v_node       movement_request_nodes;
BEGIN
    PERFORM check_reason('release_quarantine', p_reason,
                         'Say what was wrong and why the node may run again, e.g. the executor was fixed.');

    SELECT node.request_id INTO v_request_id FROM movement_request_nodes node WHERE node.id = p_node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'node % does not exist', p_node_id USING ERRCODE = 'QT011',
            HINT = 'Check the node id and the network (schema) you are connected to.';
    END IF;
    PERFORM 1 FROM movement_requests WHERE id = v_request_id FOR UPDATE;
    SELECT * INTO STRICT v_node FROM movement_request_nodes node WHERE node.id = p_node_id FOR UPDATE;
    IF v_node.quarantined_at IS NULL OR v_node.finished_at IS NOT NULL THEN
        RAISE EXCEPTION 'node % is % and not quarantined: there is nothing to release', p_node_id, v_node.node_state
            USING ERRCODE = 'QT021', HINT = 'The quarantined_nodes view lists the nodes set aside.';
    END IF;

    UPDATE movement_request_nodes node
       SET quarantined_at    = NULL,
           quarantine_reason = NULL,
           lost_claims       = 0,
           not_before        = CASE WHEN node.node_state = 'READY' THEN NULL ELSE node.not_before END,
           lease_until       = CASE WHEN node.node_state IN ('SUBMITTING', 'UNKNOWN')
                                    THEN least(node.lease_until, v_now) ELSE node.lease_until END,
           next_observe_at   = CASE WHEN node.node_state IN ('SUBMITTED', 'OBSERVING')
                                    THEN least(node.next_observe_at, v_now) ELSE node.next_observe_at END,
           updated_at        = v_now
     WHERE node.id = p_node_id;
    PERFORM write_audit(ARRAY[(v_actor, 'node', p_node_id::text, v_request_id, 'quarantine_released',
                               v_node.node_state::text, v_node.node_state::text,
                               jsonb_build_object('reason', p_reason, 'quarantined_at', v_node.quarantined_at,
                                                  'quarantine_reason', v_node.quarantine_reason)
                              )::qtg.audit_event]);
    IF v_node.node_state = 'READY' THEN
        PERFORM notify_work('ready');
    END IF;
    RETURN v_node.node_state;
END
$$;
