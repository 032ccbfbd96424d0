-- follow_node_transition: what a node's new state means for the rest of its
-- movement. Internal; called after the node row was moved (from-state
-- guarded), with the request lock, then the node lock, held.
--
--   COMPLETED | FAILED  the DAG step (finish_node): children readied or skipped,
--                       counters moved, the request settled when nothing is open
--   SKIPPED             one open node fewer; the request may settle (a stop
--                       already skipped every PENDING node, descendants included)
--   READY               back in the dispatch queue: runners are woken, unless a
--                       due expiry now applies (recheck_expiry), which skips it
--   other states        nothing further
-- Returns the node's state afterwards (READY may have become SKIPPED).
CREATE OR REPLACE FUNCTION follow_node_transition(
    p_node_id    bigint,
    p_request_id bigint,
    p_to         qtg.node_state,
    p_actor      text
) RETURNS qtg.node_state
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    CASE
        WHEN p_to IN ('COMPLETED', 'FAILED') THEN
            PERFORM finish_node(p_node_id, p_request_id, p_to, p_actor);
        WHEN p_to = 'SKIPPED' THEN
            UPDATE movement_requests SET open_nodes = open_nodes - 1, updated_at = clock() WHERE id = p_request_id;
            PERFORM settle_request(p_request_id, p_actor);
        WHEN p_to = 'READY' THEN
            -- an expiry waived for a side effect that never happened no longer holds
            IF recheck_expiry(p_request_id, p_actor) THEN
                RETURN 'SKIPPED';
            END IF;
            PERFORM notify_work('ready');
        ELSE
            NULL;
    END CASE;
    RETURN p_to;
END
$$;
