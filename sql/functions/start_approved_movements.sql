-- start_approved_movements: APPROVED -> EXECUTING; root nodes PENDING -> READY.
-- Claims up to p_max approved requests with FOR UPDATE SKIP LOCKED (several
-- dispatchers may call it at once), highest priority first, and starts them
-- in one set-based statement: the requests, their root nodes, an audit row for
-- each, and each request's callback (enqueue_callback, the one definition of
-- its payload). Locks: the requests, then their root nodes. Returns the number
-- of movements started.
CREATE OR REPLACE FUNCTION start_approved_movements(p_max integer DEFAULT 100, p_actor text DEFAULT 'node_dispatcher')
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_started integer;
BEGIN
    IF p_max IS NULL OR p_max < 1 OR p_max > 10000 THEN
        RAISE EXCEPTION 'p_max must be between 1 and 10000, got %', p_max USING ERRCODE = 'QT002';
    END IF;

    WITH picked AS (
        SELECT id
          FROM movement_requests
         WHERE request_state = 'APPROVED'
         ORDER BY priority DESC, id
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    ), started AS (
        UPDATE movement_requests request
           SET request_state = 'EXECUTING', started_at = v_now, updated_at = v_now
          FROM picked
         WHERE request.id = picked.id
           AND request.request_state = 'APPROVED'
        RETURNING request.*
    ), roots AS (
        UPDATE movement_request_nodes node
           SET node_state = 'READY', updated_at = v_now
          FROM started
         WHERE node.request_id = started.id
           AND node.node_state = 'PENDING'
           AND node.pending_parents = 0
        RETURNING node.id, node.request_id
    ), audited AS (
        INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
        SELECT v_now, p_actor, 'request', id::text, id, 'state_changed', 'APPROVED', 'EXECUTING', '{}'::jsonb
          FROM started
        UNION ALL
        SELECT v_now, p_actor, 'node', id::text, request_id, 'state_changed', 'PENDING', 'READY', '{"root": true}'::jsonb
          FROM roots
    ), callbacks AS (
        SELECT enqueue_callback(started, 'APPROVED', '{}') FROM started
    )
    SELECT count(*) INTO v_started FROM callbacks;

    IF v_started > 0 THEN
        PERFORM notify_work('ready');
    END IF;
    RETURN v_started;
END
$$;

COMMENT ON FUNCTION start_approved_movements IS 'access: runner';
