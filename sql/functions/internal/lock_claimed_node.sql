-- lock_claimed_node: the guard of the single-node completion calls
-- (complete_recovery, fail_submit). Internal. The same locks,
-- in the same order, and the same checks (claim_refusals) as lock_claimed_nodes
-- for a batch of one, without a batch's arrays: the secret hashed, the node's
-- movement locked, then the node, each by its key AND the hash, so a node
-- presented with a wrong secret is never locked; then the node as it is once
-- locked (or, not locked, as it is) is checked. A refused node raises (QT002,
-- QT011, QT030, QT021, with the hint an operator needs: raise_node_error) and
-- nothing changes; otherwise returns the node as locked. A NULL node id is the
-- batch guard's to refuse (QT002). Plans: one per statement for the session
-- (force_generic_plan), as for the batch guard (p_claims as there: fail_submit
-- takes a dispatcher's claim only, complete_recovery any stored one): its callers run in the default
-- mode, which would plan these key lookups again on every call. Measured on
-- one PENDING observation (when complete_observe was a call of its own): 0.46
-- ms of server time through the batch guard, about 0.13 through this one.
CREATE OR REPLACE FUNCTION lock_claimed_node(
    p_node_id      bigint,
    p_claim_secret text,
    p_states       qtg.node_state[],
    p_call         text,
    p_claims       text DEFAULT 'stored'
) RETURNS movement_request_nodes
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_hash    bytea;
    v_node    movement_request_nodes;
    v_refusal record;
BEGIN
    IF p_node_id IS NULL THEN
        PERFORM lock_claimed_nodes(p_call, ARRAY[p_node_id], ARRAY[p_claim_secret], p_states, p_claims => p_claims);
    END IF;
    v_hash := claim_hash(p_claim_secret);
    IF v_hash IS NOT NULL THEN
        PERFORM 1 FROM movement_requests r
         WHERE r.id = (SELECT n.request_id FROM movement_request_nodes n
                        WHERE n.id = p_node_id AND claim_held(v_hash, n.claim_hash, n.id, n.claim_token, n.xmin, p_claims))
           FOR UPDATE;
        SELECT * INTO v_node FROM movement_request_nodes n
         WHERE n.id = p_node_id AND claim_held(v_hash, n.claim_hash, n.id, n.claim_token, n.xmin, p_claims)
           FOR UPDATE;
    END IF;
    SELECT * INTO STRICT v_refusal
      FROM claim_refusals(p_call, ARRAY[p_node_id], ARRAY[v_hash], p_states, false, clock(), p_claims);
    PERFORM raise_node_error(v_refusal.code, v_refusal.message);
    RETURN v_node;
END
$$;
