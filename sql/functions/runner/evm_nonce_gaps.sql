-- evm_nonce_gaps: the nonces of treasury accounts that will never be broadcast
-- unless the evm_nonce_reaper closes them (a zero-value self-transfer, a
-- fill): below the account's next nonce (evm_nonces) and at or above the first
-- nonce the engine recorded for it, held by no live intent (CLAIMED, PREPARED,
-- SUBMITTED) but only by intents that FAILED or were ABANDONED (requeue_node),
-- or by none at all (an allocation that skipped ahead), with no fill recorded
-- yet and not reported closed on the chain (evm_closed_nonces). A gap listed
-- here may still be consumed on the chain (a failed intent's transaction
-- mined after all, or a transaction the engine never recorded): the reaper
-- reads the account's latest count and the receipts of ``tx_hashes`` (what
-- the engine recorded at that nonce) before it signs anything.
-- Reads from each account's settled mark up (evm_nonce_marks: every nonce
-- under it is settled for good, settle_evm_nonces), so the cost follows the
-- nonces not yet settled, not the account's history.
-- Up to p_max (1..1000, QT002), lowest nonces first; with what signing a fill
-- needs: the signer's id, the RPC URL's variable, the fee caps, the chain id.
-- Reads only; takes no lock.
CREATE OR REPLACE FUNCTION evm_nonce_gaps(p_max integer DEFAULT 100)
RETURNS TABLE (
    chain_key                text,
    sender                   text,
    nonce                    bigint,
    signer_id                text,
    rpc_url_env              text,
    max_fee_per_gas          numeric,
    max_priority_fee_per_gas numeric,
    chain_id                 bigint,
    tx_hashes                text[]
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    PERFORM check_args('evm_nonce_gaps', p_max => p_max, p_max_limit => 1000);
    RETURN QUERY
    WITH accounts AS (
        -- from the account's settled mark (settle_evm_nonces: every nonce under it
        -- is settled for good), or from its first nonce while it has none
        SELECT e.chain_key, e.address, e.next_nonce,
               coalesce(m.settled_below,
                        (SELECT min(i.nonce) FROM node_intents i
                          WHERE i.chain_key = e.chain_key AND i.sender = e.address)) AS from_nonce
          FROM evm_nonces e
          LEFT JOIN evm_nonce_marks m ON m.chain_key = e.chain_key AND m.address = e.address
    ), candidates AS (
        SELECT a.chain_key, a.address, g.nonce
          FROM accounts a
         CROSS JOIN LATERAL generate_series(a.from_nonce, a.next_nonce - 1) AS g(nonce)
         WHERE a.from_nonce IS NOT NULL
    ), taken AS (
        -- no gap: a live intent's nonce, a fill's, or one reported closed; per
        -- account from its first candidate up, each a range of an index on the
        -- account and nonce (OFFSET 0 keeps the subquery a scan per account:
        -- joined to the accounts, it was planned as a merge on the account alone,
        -- reading every nonce the account ever used)
        SELECT t.chain_key, t.sender, t.nonce
          FROM accounts a
         CROSS JOIN LATERAL (
            SELECT i.chain_key, i.sender, i.nonce
              FROM node_intents i
             WHERE i.chain_key = a.chain_key AND i.sender = a.address AND i.nonce >= a.from_nonce
               AND i.nonce < a.next_nonce
               AND i.intent_state IN ('CLAIMED', 'PREPARED', 'SUBMITTED')
            UNION ALL
            SELECT x.chain_key, x.sender, x.nonce
              FROM evm_transactions x
             WHERE x.chain_key = a.chain_key AND x.sender = a.address AND x.nonce >= a.from_nonce
               AND x.nonce < a.next_nonce
               AND x.purpose = 'fill'
            UNION ALL
            SELECT c.chain_key, c.address, c.nonce
              FROM evm_closed_nonces c
             WHERE c.chain_key = a.chain_key AND c.address = a.address AND c.nonce >= a.from_nonce
               AND c.nonce < a.next_nonce
            OFFSET 0) t
    ), gaps AS (
        -- a set difference, hashed or sorted: every nonce compared once (the
        -- NOT EXISTS it replaces was planned as a merge on the account alone,
        -- comparing each nonce with every intent of the account: 3.5 s a
        -- call at 3,000 nonces, 20 s at 10,000)
        SELECT c.chain_key, c.address, c.nonce FROM candidates c
        EXCEPT
        SELECT t.chain_key, t.sender, t.nonce FROM taken t
    )
    SELECT g.chain_key, g.address, g.nonce, t.signer_id, ch.rpc_url_env, ch.max_fee_per_gas,
           ch.max_priority_fee_per_gas, ch.chain_id,
           ARRAY(SELECT x.tx_hash FROM evm_transactions x
                  WHERE x.chain_key = g.chain_key AND x.sender = g.address AND x.nonce = g.nonce
                  ORDER BY x.id)
      FROM gaps g
      JOIN chains ch ON ch.chain_key = g.chain_key
      JOIN treasury_accounts t ON t.chain_key = g.chain_key AND t.address = g.address
     ORDER BY g.nonce, g.chain_key, g.address
     LIMIT p_max;
END
$$;
