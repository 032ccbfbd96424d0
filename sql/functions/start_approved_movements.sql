-- start_approved_movements: APPROVED -> EXECUTING; root nodes PENDING -> READY.
-- Claims up to p_max approved requests with FOR UPDATE SKIP LOCKED (several
-- dispatchers may call it at once), highest priority first. Lock: each request,
-- then its root nodes. Returns the number of movements started.
CREATE OR REPLACE FUNCTION start_approved_movements(p_max integer DEFAULT 100, p_actor text DEFAULT 'node_dispatcher')
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now     timestamptz := clock();
    v_request bigint;
    v_started integer := 0;
BEGIN
    IF p_max IS NULL OR p_max < 1 OR p_max > 10000 THEN
        RAISE EXCEPTION 'p_max must be between 1 and 10000, got %', p_max USING ERRCODE = 'QT002';
    END IF;

    FOR v_request IN
        SELECT id FROM movement_requests
         WHERE request_state = 'APPROVED'
         ORDER BY priority DESC, id
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM set_request_state(v_request, 'APPROVED', 'EXECUTING', p_actor);

        WITH roots AS (
            UPDATE movement_request_nodes
               SET node_state = 'READY', updated_at = v_now
             WHERE request_id = v_request
               AND node_state = 'PENDING'
               AND pending_parents = 0
            RETURNING id
        )
        INSERT INTO audit_outbox (occurred_at, actor, entity, entity_id, request_id, action, from_state, to_state, detail)
        SELECT v_now, p_actor, 'node', id::text, v_request, 'state_changed', 'PENDING', 'READY', '{"root": true}'
          FROM roots;

        v_started := v_started + 1;
    END LOOP;

    IF v_started > 0 THEN
        PERFORM notify_work('ready');
    END IF;
    RETURN v_started;
END
$$;

COMMENT ON FUNCTION start_approved_movements IS 'access: runner';
