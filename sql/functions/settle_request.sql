-- settle_request: ends an EXECUTING request once nothing is open (open_nodes = 0):
-- FAILED if any node failed, else CANCELLED/EXPIRED if a stop was requested,
-- else COMPLETED. A request with open nodes is left as it is. Internal; the
-- caller holds the request lock. Returns the request's state afterwards.
CREATE OR REPLACE FUNCTION settle_request(p_request_id bigint, p_actor text) RETURNS qtg.request_state
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_request movement_requests;
    v_final   qtg.request_state;
BEGIN
    SELECT * INTO STRICT v_request FROM movement_requests WHERE id = p_request_id;
    IF v_request.request_state <> 'EXECUTING' OR v_request.open_nodes > 0 THEN
        RETURN v_request.request_state;
    END IF;

    v_final := CASE
                   WHEN v_request.failed_nodes > 0 THEN 'FAILED'
                   WHEN v_request.stop_reason IS NOT NULL THEN v_request.stop_reason
                   ELSE 'COMPLETED'
               END;
    -- the callback says what happened to every node: a cancelled movement may
    -- still have moved money before the cancel
    PERFORM set_request_state(p_request_id, 'EXECUTING', v_final, p_actor,
                              jsonb_build_object(
                                  'failed_nodes', v_request.failed_nodes,
                                  'stop_reason', v_request.stop_reason,
                                  'nodes', (SELECT jsonb_object_agg(node_state, total)
                                              FROM (SELECT node_state, count(*) AS total
                                                      FROM movement_request_nodes
                                                     WHERE request_id = p_request_id
                                                     GROUP BY node_state) counts)));
    RETURN v_final;
END
$$;
