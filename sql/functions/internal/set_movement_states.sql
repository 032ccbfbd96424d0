-- set_movement_states: the one place a movement changes state. Internal.
-- From-state: p_from, for every movement of p_movement_ids (guarded: if one is
-- not in it, QT020 and nothing changes). To-state: p_to[i] for movement i.
-- The caller holds the movements' locks. Writes each movement's audit event and
-- its callback, with p_details[i], in the same transaction; p_actors[i] acts.
-- p_closed[i] and p_failed[i] (NULL: 0) move movement i's open_nodes down and
-- failed_nodes up in the same row write: a movement that settles as its last
-- nodes finish (settle_movements) is written once, not once for its counters
-- and once for its state. p_at: the time recorded (clock() when NULL; an
-- approval passes the time of its decision).
CREATE OR REPLACE FUNCTION set_movement_states(
    p_movement_ids bigint[],
    p_from         qtg.request_state,
    p_to           qtg.request_state[],
    p_actors       text[],
    p_details      jsonb[] DEFAULT NULL,
    p_closed       integer[] DEFAULT NULL,
    p_failed       integer[] DEFAULT NULL,
    p_at           timestamptz DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := coalesce(p_at, clock());
    v_n       integer := cardinality(p_movement_ids);
    v_details jsonb[] := coalesce(p_details, array_fill(NULL::jsonb, ARRAY[v_n]));
    v_moved   bigint[];
    v_stray   bigint;
BEGIN
    WITH moved AS (
        UPDATE movement_requests r
           SET request_state = i.to_state,
               approved_at   = CASE WHEN i.to_state = 'APPROVED' THEN v_now ELSE r.approved_at END,
               approved_by   = CASE WHEN i.to_state = 'APPROVED' THEN i.actor ELSE r.approved_by END,
               started_at    = CASE WHEN i.to_state = 'EXECUTING' THEN v_now ELSE r.started_at END,
               finished_at   = CASE WHEN i.to_state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'EXPIRED') THEN v_now END,
               open_nodes    = r.open_nodes - coalesce(i.closed, 0),
               failed_nodes  = r.failed_nodes + coalesce(i.failed, 0),
               updated_at    = v_now
          FROM unnest(p_movement_ids, p_to, p_actors,
                      coalesce(p_closed, array_fill(NULL::integer, ARRAY[v_n])),
                      coalesce(p_failed, array_fill(NULL::integer, ARRAY[v_n]))) AS i(id, to_state, actor, closed, failed)
          -- the from-state read by the movement's key (locked by the caller),
          -- so the update reaches its rows by key alone: sql/README.md,
          -- "Statistics lag the work"
         CROSS JOIN LATERAL (SELECT m.request_state FROM movement_requests m WHERE m.id = i.id OFFSET 0) cur
         WHERE r.id = i.id
           AND cur.request_state = p_from
        RETURNING r.id
    )
    SELECT array_agg(moved.id) INTO v_moved FROM moved;
    IF coalesce(cardinality(v_moved), 0) <> v_n THEN
        -- the raise undoes the update with the rest of the call
        SELECT i.id INTO v_stray
          FROM unnest(p_movement_ids) AS i(id)
         WHERE i.id <> ALL (coalesce(v_moved, '{}'))
         LIMIT 1;
        RAISE EXCEPTION 'movement % is not in state %', v_stray, p_from USING ERRCODE = 'QT020';
    END IF;

    PERFORM write_audit(array_agg((i.actor, 'request', i.id::text, i.id, 'state_changed', p_from::text,
                                   i.to_state::text, i.detail)::qtg.audit_event ORDER BY i.ord))
       FROM unnest(p_movement_ids, p_to, p_actors, v_details) WITH ORDINALITY AS i(id, to_state, actor, detail, ord);
    PERFORM enqueue_callbacks(p_movement_ids, array_fill(p_from, ARRAY[v_n]), v_details);
END
$$;
