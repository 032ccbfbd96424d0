-- lock_claimed_node: the common guard of every completion call. Internal.
-- Locks the node's request, then the node (the documented order), and checks
-- that the node exists, that the caller's claim token is the current one
-- (fencing: a stale worker's late call raises QT030 and changes nothing) and
-- that the node is in one of p_states (else QT021).
CREATE OR REPLACE FUNCTION lock_claimed_node(
    p_node_id     bigint,
    p_claim_token bigint,
    p_states      qtg.node_state[],
    p_call        text
) RETURNS movement_request_nodes
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_request_id bigint;
    v_node       movement_request_nodes;
BEGIN
    SELECT request_id INTO v_request_id FROM movement_request_nodes WHERE id = p_node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: node % does not exist', p_call, p_node_id
            USING ERRCODE = 'QT011', HINT = 'Check the node id and the network (schema) you are connected to.';
    END IF;
    PERFORM 1 FROM movement_requests WHERE id = v_request_id FOR UPDATE;
    SELECT * INTO STRICT v_node FROM movement_request_nodes WHERE id = p_node_id FOR UPDATE;

    IF p_claim_token IS DISTINCT FROM v_node.claim_token THEN
        RAISE EXCEPTION '%: stale claim on node %: it holds token %, the call presented %',
                        p_call, p_node_id, v_node.claim_token, p_claim_token
            USING ERRCODE = 'QT030',
                  HINT = 'Another worker claimed the node after this one; drop this result. Recovery reconciles any side effect.';
    END IF;
    IF NOT v_node.node_state = ANY (p_states) THEN
        RAISE EXCEPTION '%: node % is %, expected one of %', p_call, p_node_id, v_node.node_state, p_states
            USING ERRCODE = 'QT021';
    END IF;
    RETURN v_node;
END
$$;
