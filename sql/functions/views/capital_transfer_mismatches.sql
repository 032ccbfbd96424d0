-- capital_transfer_mismatches: transfers into an exchange's deposit address
-- that the exchange has not credited as sent (capital_transfer_followups,
-- kept by the capital_transfer_followup sidecar), with the problem:
--   amount mismatch     credited, but not the movement's amount
--   deposit failed      the venue's record says failed
--   not credited        still waiting past its deadline (three bybit-deposit
--                       lane baselines after the transfer landed)
CREATE OR REPLACE VIEW capital_transfer_mismatches AS
SELECT f.node_id,
       f.request_id AS movement_id,
       r.external_id,
       f.venue_key,
       f.chain_key,
       f.coin,
       f.deposit_address,
       f.tx_hash,
       f.expected_amount,
       f.credited_amount,
       CASE f.followup_state
           WHEN 'MISMATCH' THEN 'amount mismatch'
           WHEN 'FAILED' THEN 'deposit failed'
           ELSE 'not credited'
       END AS problem,
       f.landed_at,
       f.deadline_at,
       f.checks,
       f.last_error,
       f.record
  FROM capital_transfer_followups f
  JOIN movement_requests r ON r.id = f.request_id
 WHERE f.followup_state IN ('MISMATCH', 'FAILED')
    OR (f.followup_state = 'WAITING' AND f.deadline_at < clock());
