-- claim_held: whether a secret's hash (claim_hash) proves the current claim of
-- a node with this claim_hash, id, claim_token and row version (xmin), for a
-- call that takes the claims p_claims names. Internal.
--   stored    the node stores that hash: a dispatcher's or recovery's claim,
--             which writes it (the recovery and quarantine calls)
--   dispatched  the same proof, for the calls only a dispatcher's claim may
--             make (prepare, submit, release, fail_submit): claim_refusals
--             refuses a recovery's claim for them, QT021
--   observed  the secret is the one an observer's claim of the caller's own
--             transaction handed out for the node at this claim_token and row
--             version (observe_claim_secret: an observer's claim writes
--             nothing): the observer's report, which a dispatcher's secret,
--             still stored while the node is observed, must never make
--   any       either (a quarantine, which any claimer may ask for)
-- Never NULL: a NULL hash proves nothing. A transaction with no id yet has
-- made no observer's claim, and is not given one here.
CREATE OR REPLACE FUNCTION claim_held(
    p_hash        bytea,
    p_node_hash   bytea,
    p_node_id     bigint,
    p_claim_token bigint,
    p_version     xid,
    p_claims      text
) RETURNS boolean
LANGUAGE sql
STABLE
AS $$
    SELECT coalesce(p_claims IN ('stored', 'dispatched', 'any') AND p_hash = p_node_hash, false)
           OR coalesce(p_claims IN ('observed', 'any')
                       AND p_hash = claim_hash(observe_claim_secret(p_node_id, p_claim_token, p_version,
                                                                    pg_current_xact_id_if_assigned())),
                       false)
$$;
