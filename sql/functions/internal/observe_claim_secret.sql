-- observe_claim_secret: the secret an observer's claim hands out for a node at
-- its claim_token and row version (the xmin of the version the claim locked),
-- in the transaction p_xid. Internal. HMAC-SHA256 under qtg.claim_proof_key
-- (only the owner reads it) of the network, the node id, the claim_token, the
-- row version, the transaction id and the server's start time, as 64 hex
-- characters (the length of every claim's secret, so claim_hash takes it like
-- the others). The claim writes nothing: its transaction holds the node's row
-- lock until it commits, and the guard (claim_held) recomputes the secret for
-- the node as it is and the caller's transaction, so a secret of another
-- transaction, node, network or claim matches nothing; nor does one whose
-- node was written since (a quarantine, another observer's report, a
-- recorded manual execution: each makes a new row version), which a claim
-- rolled back to a savepoint could otherwise outlive; nor one kept across a
-- restart, a failover or a restore, which may hand out a transaction id again.
-- NULL when p_xid is NULL (a transaction that has written nothing and claimed
-- nothing has no id).
CREATE OR REPLACE FUNCTION observe_claim_secret(
    p_node_id     bigint,
    p_claim_token bigint,
    p_version     xid,
    p_xid         xid8
) RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT encode(sha256(k.outer_key
                         || sha256(k.inner_key
                                   || convert_to(format('%s/%s/%s/%s/%s/%s', current_schema(), p_node_id,
                                                        p_claim_token, p_version, p_xid,
                                                        extract(epoch FROM pg_postmaster_start_time())),
                                                 'UTF8'))), 'hex')
      FROM qtg.claim_proof_key k
     WHERE p_xid IS NOT NULL
$$;
