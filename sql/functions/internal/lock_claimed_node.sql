-- lock_claimed_node: lock_claimed_nodes for one node, for the single-node
-- completion calls. Internal. A refused node raises (QT002, QT011, QT030,
-- QT021, with the hint an operator needs) and nothing changes, and a node
-- presented with a wrong secret is never locked; otherwise returns the node as
-- it is once locked (its movement, then it, locked in that order).
CREATE OR REPLACE FUNCTION lock_claimed_node(
    p_node_id      bigint,
    p_claim_secret text,
    p_states       qtg.node_state[],
    p_call         text
) RETURNS movement_request_nodes
LANGUAGE plpgsql
AS $$
DECLARE
    v_check record;
    v_node  movement_request_nodes;
BEGIN
    SELECT * INTO STRICT v_check
      FROM lock_claimed_nodes(p_call, ARRAY[p_node_id], ARRAY[p_claim_secret], p_states);
    PERFORM raise_node_error(v_check.error_codes[1], v_check.error_messages[1]);
    SELECT * INTO STRICT v_node FROM movement_request_nodes WHERE id = p_node_id;
    RETURN v_node;
END
$$;
