-- lock_claimed_nodes: the guard every completion call starts with. Internal.
-- Checks the node ids (at most 1000, each once, none NULL, one token each:
-- QT002, and nothing is locked), locks their movements, then the nodes, each
-- in id order (the documented lock order; id order keeps two callers from
-- waiting on each other in a cycle), then checks each element against the
-- node as it is once locked:
--   QT011  no such node
--   QT030  the token is not the node's current claim token (fencing: another
--          worker, or recovery, holds it now), or p_live_lease and the claim's
--          lease has run out (a step that comes before a side effect)
--   QT021  the node is in none of p_states
-- Returns the errors as two arrays, element i for node i: NULL where the node
-- may go on. Callers read the nodes again in a later statement, which
-- sees them as locked here.
CREATE OR REPLACE FUNCTION lock_claimed_nodes(
    p_call         text,
    p_node_ids     bigint[],
    p_claim_tokens bigint[],
    p_states       qtg.node_state[],
    p_live_lease   boolean DEFAULT false
) RETURNS TABLE (error_codes text[], error_messages text[])
LANGUAGE plpgsql
ROWS 1
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock();
BEGIN
    IF cardinality(p_node_ids) > 1000 THEN
        RAISE EXCEPTION '%: at most 1000 nodes a call, got %', p_call, cardinality(p_node_ids)
            USING ERRCODE = 'QT002';
    END IF;
    IF coalesce(cardinality(p_claim_tokens), 0) <> coalesce(cardinality(p_node_ids), 0) THEN
        RAISE EXCEPTION '%: give one claim token per node', p_call USING ERRCODE = 'QT002';
    END IF;
    IF array_position(p_node_ids, NULL) IS NOT NULL
       OR (SELECT count(DISTINCT id) FROM unnest(p_node_ids) id) <> cardinality(p_node_ids) THEN
        RAISE EXCEPTION '%: node ids must be given once each and not be NULL', p_call
            USING ERRCODE = 'QT002';
    END IF;

    PERFORM 1 FROM movement_requests r
     WHERE r.id IN (SELECT n.request_id FROM movement_request_nodes n WHERE n.id = ANY (p_node_ids))
     ORDER BY r.id
       FOR UPDATE;
    PERFORM 1 FROM movement_request_nodes n WHERE n.id = ANY (p_node_ids) ORDER BY n.id FOR UPDATE;

    RETURN QUERY
    SELECT array_agg(c.code ORDER BY i.ord), array_agg(c.message ORDER BY i.ord)
      FROM unnest(p_node_ids, p_claim_tokens) WITH ORDINALITY AS i(node_id, claim_token, ord)
      LEFT JOIN movement_request_nodes n ON n.id = i.node_id
     CROSS JOIN LATERAL (
           SELECT CASE
                      WHEN n.id IS NULL THEN 'QT011'
                      WHEN i.claim_token IS DISTINCT FROM n.claim_token THEN 'QT030'
                      WHEN NOT n.node_state = ANY (p_states) THEN 'QT021'
                      WHEN p_live_lease AND n.lease_until <= v_now THEN 'QT030'
                  END AS code,
                  CASE
                      WHEN n.id IS NULL THEN format('%s: node %s does not exist', p_call, i.node_id)
                      WHEN i.claim_token IS DISTINCT FROM n.claim_token THEN
                          -- never the current token: it would hand the claim to the caller
                          format('%s: stale claim on node %s: the token presented is not its current claim',
                                 p_call, i.node_id)
                      WHEN NOT n.node_state = ANY (p_states) THEN
                          format('%s: node %s is %s, expected one of %s', p_call, i.node_id, n.node_state, p_states)
                      WHEN p_live_lease AND n.lease_until <= v_now THEN
                          format('%s: the claim on node %s expired at %s', p_call, i.node_id, n.lease_until)
                  END AS message) c;
END
$$;
