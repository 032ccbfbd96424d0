-- lock_claimed_nodes: the guard every completion call starts with. Internal.
-- Checks the node ids (at most 1000, each once, none NULL, one claim secret
-- each: QT002, and nothing is locked), hashes each secret once (claim_hash),
-- then locks the movements of the nodes whose current claim the secret proves
-- (claim_held, for the claims p_claims names: 'stored' by default, a
-- dispatcher's or recovery's claim; 'dispatched', a dispatcher's only, for
-- the calls of the dispatch (a recovery's claim is refused QT021);
-- 'observed', an observer's claim of this transaction; 'any'), then those nodes, each in id order (the documented lock order; id order keeps two
-- callers from waiting on each other in a cycle). Rows are locked by id AND
-- proof: a node presented with a wrong secret is never locked, so a forged
-- call neither waits for the node's owner nor holds it up. Then each element
-- is checked against the node as it is once locked, by claim_refusals (QT002
-- a malformed secret, QT011 no such node, QT030 a stale claim or, with
-- p_live_lease, a lease run out, QT021 a node in none of p_states).
-- Plans: one per statement for the session (force_generic_plan), whatever the
-- caller's plan mode: its statements reach every row by primary key, and a
-- caller in the default mode (complete_observe, which was once called for
-- every observation) had them planned again on each call, about 0.3 ms of a
-- one-node call.
-- Returns the errors as two arrays, element i for node i: NULL where the node
-- may go on. Callers read the nodes again in a later statement, which
-- sees them as locked here; the intent of the claim is the one of the node's
-- claim_token (the claim counter).
CREATE OR REPLACE FUNCTION lock_claimed_nodes(
    p_call          text,
    p_node_ids      bigint[],
    p_claim_secrets text[],
    p_states        qtg.node_state[],
    p_live_lease    boolean DEFAULT false,
    p_claims        text DEFAULT 'stored'
) RETURNS TABLE (error_codes text[], error_messages text[])
LANGUAGE plpgsql
ROWS 1
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now    timestamptz := clock();
    v_n      integer := coalesce(cardinality(p_node_ids), 0);
    v_once   boolean;
    v_hashes bytea[];
BEGIN
    IF v_n > 1000 THEN
        RAISE EXCEPTION '%: at most 1000 nodes a call, got %', p_call, v_n
            USING ERRCODE = 'QT002', HINT = 'Split the call into batches of at most 1000 nodes.';
    END IF;
    IF coalesce(cardinality(p_claim_secrets), 0) <> v_n THEN
        RAISE EXCEPTION '%: give one claim secret per node', p_call
            USING ERRCODE = 'QT002', HINT = 'Pass the claim_secret each node''s claim returned, in the order of the node ids.';
    END IF;
    -- each secret hashed once, here; the statements below compare hashes
    SELECT count(DISTINCT u.node_id) = v_n AND count(u.node_id) = v_n,
           array_agg(claim_hash(u.secret) ORDER BY u.ord)
      INTO v_once, v_hashes
      FROM unnest(p_node_ids, p_claim_secrets) WITH ORDINALITY AS u(node_id, secret, ord);
    IF NOT v_once THEN
        RAISE EXCEPTION '%: node ids must be given once each and not be NULL', p_call
            USING ERRCODE = 'QT002', HINT = 'Name each node once, with its own claim secret.';
    END IF;

    PERFORM 1 FROM movement_requests r
     WHERE r.id IN (SELECT n.request_id
                      FROM unnest(p_node_ids, v_hashes) AS u(node_id, claim_hash)
                      JOIN movement_request_nodes n
                        ON n.id = u.node_id AND claim_held(u.claim_hash, n.claim_hash, n.id, n.claim_token, n.xmin, p_claims))
     ORDER BY r.id
       FOR UPDATE;
    PERFORM 1 FROM movement_request_nodes n
      JOIN unnest(p_node_ids, v_hashes) AS u(node_id, claim_hash)
        ON n.id = u.node_id AND claim_held(u.claim_hash, n.claim_hash, n.id, n.claim_token, n.xmin, p_claims)
     ORDER BY n.id
       FOR UPDATE OF n;

    -- a node locked above is still held by the claim it was locked by; any
    -- other was not locked, and no claim can have given it that claim since
    RETURN QUERY
    SELECT array_agg(c.code ORDER BY c.ord), array_agg(c.message ORDER BY c.ord)
      FROM claim_refusals(p_call, p_node_ids, v_hashes, p_states, p_live_lease, v_now, p_claims) AS c;
END
$$;
