-- settle_movements: ends every EXECUTING movement of p_movement_ids that has
-- nothing open once p_closed[i] more of its nodes are closed (open_nodes =
-- p_closed[i]; p_failed[i] of them failed, counted with failed_nodes), writing the counters with the state in one row write
-- (set_movement_states): FAILED if a node failed, else its stop reason
-- (CANCELLED, EXPIRED) if one was requested, else COMPLETED. Movements with
-- open nodes, or not EXECUTING, are left as they are. Internal; the caller
-- holds the movements' locks; p_actors[i] settles movement i. The callback
-- says what happened to every node (a cancelled movement may still have moved
-- money before the cancel): the count of its nodes by state.
-- The caller (finish_nodes) hands in only movements that settle: the counters
-- of one left out here would not move.
-- Each movement is read by its key (sql/README.md, "Statistics lag the
-- work"): joined, on statistics that thought no movement was executing, the
-- plan read every EXECUTING movement through the state index to find the few
-- given.
CREATE OR REPLACE FUNCTION settle_movements(
    p_movement_ids bigint[],
    p_actors       text[],
    p_closed       integer[],
    p_failed       integer[]
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids     bigint[];
    v_finals  qtg.request_state[];
    v_actors  text[];
    v_details jsonb[];
    v_closed  integer[];
    v_failed  integer[];
BEGIN
    SELECT array_agg(r.id ORDER BY r.id),
           array_agg(CASE
                         WHEN r.failed_nodes + s.failed > 0 THEN 'FAILED'
                         WHEN r.stop_reason IS NOT NULL THEN r.stop_reason
                         ELSE 'COMPLETED'
                     END::qtg.request_state ORDER BY r.id),
           array_agg(s.actor ORDER BY r.id),
           array_agg(jsonb_build_object('failed_nodes', r.failed_nodes + s.failed, 'stop_reason', r.stop_reason,
                                        'nodes', counts.nodes) ORDER BY r.id),
           array_agg(s.closed ORDER BY r.id),
           array_agg(s.failed ORDER BY r.id)
      INTO v_ids, v_finals, v_actors, v_details, v_closed, v_failed
      FROM unnest(p_movement_ids, p_actors, p_closed, p_failed) AS s(id, actor, closed, failed)
     CROSS JOIN LATERAL (SELECT m.* FROM movement_requests m WHERE m.id = s.id OFFSET 0) r
      JOIN (SELECT c.request_id, jsonb_object_agg(c.node_state, c.total) AS nodes
              FROM (SELECT n.request_id, n.node_state, count(*) AS total
                      FROM movement_request_nodes n
                     WHERE n.request_id = ANY (p_movement_ids)
                     GROUP BY n.request_id, n.node_state) c
             GROUP BY c.request_id) counts ON counts.request_id = r.id
     WHERE r.request_state = 'EXECUTING'
       AND r.open_nodes = s.closed;

    IF v_ids IS NOT NULL THEN
        PERFORM set_movement_states(v_ids, 'EXECUTING', v_finals, v_actors, v_details, v_closed, v_failed);
    END IF;
END
$$;
