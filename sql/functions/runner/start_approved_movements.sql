-- start_approved_movements: APPROVED -> EXECUTING; root nodes PENDING -> READY.
-- Starts up to p_max approved requests through start_movement_rows (FOR UPDATE
-- SKIP LOCKED: several dispatchers may call it at once; highest priority first;
-- an audit row and a callback each), then makes their root nodes READY,
-- audited, and wakes the dispatchers. The dispatcher starts movements in its
-- claim instead (claim_ready_nodes' p_start), which claims their roots at once.
-- Locks: the requests, then their root nodes. p_actor, the worker's name, is
-- the audit rows' actor (given, within engine_limits: QT002/QT005). Returns the
-- number of movements started.
CREATE OR REPLACE FUNCTION start_approved_movements(p_max integer DEFAULT 100, p_actor text DEFAULT 'node_dispatcher')
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_start record;
BEGIN
    PERFORM check_read_committed('start_approved_movements');
    PERFORM check_args('start_approved_movements', p_max => p_max, p_max_limit => 10000);
    PERFORM check_worker('start_approved_movements', p_actor);

    SELECT * INTO v_start FROM start_movement_rows(p_max, p_actor);
    IF v_start.started = 0 THEN
        RETURN 0;
    END IF;
    UPDATE movement_request_nodes node
       SET node_state = 'READY', updated_at = clock()
     WHERE node.id = ANY (v_start.roots);
    PERFORM write_audit(v_start.readied);
    PERFORM notify_work('ready');
    RETURN v_start.started;
END
$$;
