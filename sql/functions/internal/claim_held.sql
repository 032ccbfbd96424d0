-- claim_held: whether a secret's hash (claim_hash) proves the current claim of
-- a node with this claim_hash, id and claim_token. Internal. Either the node
-- stores that hash (a dispatcher's or recovery's claim, which writes it), or
-- the secret is the one an observer's claim of the caller's own transaction
-- handed out for the node at this claim_token (observe_claim_secret: an
-- observer's claim writes nothing). p_stored false: only the latter counts
-- (an observer's report, which a dispatcher's secret, still stored while the
-- node is observed, must never make). Never NULL: a NULL hash proves nothing.
-- A transaction with no id yet has made no observer's claim, and is not given
-- one here.
CREATE OR REPLACE FUNCTION claim_held(
    p_hash        bytea,
    p_node_hash   bytea,
    p_node_id     bigint,
    p_claim_token bigint,
    p_stored      boolean
) RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT coalesce(p_stored AND p_hash = p_node_hash, false)
           OR coalesce(p_hash = claim_hash(observe_claim_secret(p_node_id, p_claim_token,
                                                                pg_current_xact_id_if_assigned())), false)
$$;
