-- evm_accounts: each treasury account that signs through the engine, per
-- chain: the next nonce it hands out, its transactions out and not settled
-- (intents PREPARED or SUBMITTED whose node has not finished: broadcast or
-- about to be, the oldest first signed when), and the nonces it left open
-- (held only by failed or abandoned intents, with no fill and not found
-- closed on the chain: the evm_nonce_reaper's work; a number that stays above
-- 0 means later transactions of the account may be stuck behind it), and
-- skipped_today: the nonces its records skipped in its day of skips (the
-- chain's count ahead of the engine's; at most 64 a day, each a fill the
-- reaper pays for), 0 once that day has ended.
-- What is out is read from the nodes in flight, as their partial indexes hold
-- them (an account's SUBMITTED intents are its whole history); the open nonces
-- from the account's settled mark up (evm_nonce_marks: none is open under it).
CREATE OR REPLACE VIEW evm_accounts AS
WITH out_now AS (
    SELECT i.chain_key, i.sender, count(*) AS in_flight, min(i.prepared_at) AS oldest_in_flight_at
      FROM movement_request_nodes n
      JOIN node_intents i ON i.node_id = n.id
     WHERE n.finished_at IS NULL
       AND ((n.node_state IN ('SUBMITTED', 'OBSERVING') AND n.quarantined_at IS NULL)
         OR (n.node_state IN ('UNKNOWN', 'SUBMITTING') AND n.quarantined_at IS NULL)
         OR (n.quarantined_at IS NOT NULL AND n.finished_at IS NULL))
       AND i.chain_key IS NOT NULL AND i.intent_state IN ('PREPARED', 'SUBMITTED')
     GROUP BY i.chain_key, i.sender
)
SELECT e.chain_key,
       e.address,
       t.signer_id,
       e.next_nonce,
       coalesce(o.in_flight, 0) AS in_flight,
       o.oldest_in_flight_at,
       (SELECT count(DISTINCT i.nonce)
          FROM node_intents i
         WHERE i.chain_key = e.chain_key AND i.sender = e.address
           -- a range, both ends given: a lower bound alone is estimated at a
           -- third of the account's intents, and read by a scan of them all
           AND i.nonce >= coalesce(m.settled_below, 0) AND i.nonce < e.next_nonce
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
       e.updated_at AS last_allocated_at,
       -- (skip_day_runs' rule, written out: a view's readers may call no engine routine)
       CASE WHEN e.skipped_since > clock() - interval '24 hours' THEN e.skipped_nonces ELSE 0 END
           AS skipped_today
  FROM evm_nonces e
  JOIN treasury_accounts t ON t.chain_key = e.chain_key AND t.address = e.address
  LEFT JOIN evm_nonce_marks m ON m.chain_key = e.chain_key AND m.address = e.address
  LEFT JOIN out_now o ON o.chain_key = e.chain_key AND o.sender = e.address
 ORDER BY e.chain_key, e.address;
