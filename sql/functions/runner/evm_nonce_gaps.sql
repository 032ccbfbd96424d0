-- evm_nonce_gaps: the nonces of treasury accounts that will never be broadcast
-- unless the evm_nonce_reaper closes them (a zero-value self-transfer, a
-- fill): below the account's next nonce (evm_nonces) and at or above the first
-- nonce the engine recorded for it, held by no live intent (CLAIMED, PREPARED,
-- SUBMITTED) but only by intents that FAILED or were ABANDONED (requeue_node),
-- or by none at all (an allocation that skipped ahead), with no fill recorded
-- yet and not reported closed on the chain (evm_nonce_closed). A gap listed
-- here may still be consumed on the chain (a failed intent's transaction
-- mined after all, or a transaction the engine never recorded): the reaper
-- reads the account's latest count and the receipts of ``tx_hashes`` (what
-- the engine recorded at that nonce) before it signs anything.
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
        SELECT e.chain_key, e.address, e.next_nonce,
               (SELECT min(i.nonce) FROM node_intents i
                 WHERE i.chain_key = e.chain_key AND i.sender = e.address) AS first_nonce
          FROM evm_nonces e
    ), candidates AS (
        SELECT a.chain_key, a.address, g.nonce
          FROM accounts a
         CROSS JOIN LATERAL generate_series(a.first_nonce, a.next_nonce - 1) AS g(nonce)
         WHERE a.first_nonce IS NOT NULL
    )
    SELECT c.chain_key, c.address, c.nonce, t.signer_id, ch.rpc_url_env, ch.max_fee_per_gas,
           ch.max_priority_fee_per_gas, ch.chain_id,
           ARRAY(SELECT x.tx_hash FROM evm_transactions x
                  WHERE x.chain_key = c.chain_key AND x.sender = c.address AND x.nonce = c.nonce
                  ORDER BY x.id)
      FROM candidates c
      JOIN chains ch ON ch.chain_key = c.chain_key
      JOIN treasury_accounts t ON t.chain_key = c.chain_key AND t.address = c.address
     WHERE NOT EXISTS (SELECT 1 FROM node_intents i
                        WHERE i.chain_key = c.chain_key AND i.sender = c.address AND i.nonce = c.nonce
                          AND i.intent_state IN ('CLAIMED', 'PREPARED', 'SUBMITTED'))
       AND NOT EXISTS (SELECT 1 FROM evm_transactions x
                        WHERE x.chain_key = c.chain_key AND x.sender = c.address AND x.nonce = c.nonce
                          AND x.purpose = 'fill')
       AND NOT evm_nonce_closed(c.chain_key, c.address, c.nonce)
     ORDER BY c.nonce, c.chain_key, c.address
     LIMIT p_max;
END
$$;
