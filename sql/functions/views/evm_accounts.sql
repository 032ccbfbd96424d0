-- evm_accounts: each treasury account that signs through the engine, per
-- chain: the next nonce it hands out, its transactions out and not settled
-- (intents PREPARED or SUBMITTED whose node has not finished: broadcast or
-- about to be, the oldest first signed when), and the nonces it left open
-- (held only by failed or abandoned intents, with no fill and not found
-- closed on the chain: the evm_nonce_reaper's work; a number that stays above
-- 0 means later transactions of the account may be stuck behind it).
CREATE OR REPLACE VIEW evm_accounts AS
SELECT e.chain_key,
       e.address,
       t.signer_id,
       e.next_nonce,
       (SELECT count(*)
          FROM node_intents i
          JOIN movement_request_nodes n ON n.id = i.node_id
         WHERE i.chain_key = e.chain_key AND i.sender = e.address
           AND i.intent_state IN ('PREPARED', 'SUBMITTED') AND n.finished_at IS NULL) AS in_flight,
       (SELECT min(i.prepared_at)
          FROM node_intents i
          JOIN movement_request_nodes n ON n.id = i.node_id
         WHERE i.chain_key = e.chain_key AND i.sender = e.address
           AND i.intent_state IN ('PREPARED', 'SUBMITTED') AND n.finished_at IS NULL) AS oldest_in_flight_at,
       (SELECT count(DISTINCT i.nonce)
          FROM node_intents i
         WHERE i.chain_key = e.chain_key AND i.sender = e.address
           AND i.intent_state IN ('FAILED', 'ABANDONED')
           AND NOT EXISTS (SELECT 1 FROM node_intents live
                            WHERE live.chain_key = i.chain_key AND live.sender = i.sender AND live.nonce = i.nonce
                              AND live.intent_state IN ('CLAIMED', 'PREPARED', 'SUBMITTED'))
           AND NOT EXISTS (SELECT 1 FROM evm_transactions f
                            WHERE f.chain_key = i.chain_key AND f.sender = i.sender AND f.nonce = i.nonce
                              AND f.purpose = 'fill')
           AND NOT EXISTS (SELECT 1 FROM evm_closed_nonces c
                            WHERE c.chain_key = i.chain_key AND c.address = i.sender AND c.nonce = i.nonce))
           AS open_nonces,
       e.updated_at AS last_allocated_at
  FROM evm_nonces e
  JOIN treasury_accounts t ON t.chain_key = e.chain_key AND t.address = e.address
 ORDER BY e.chain_key, e.address;
