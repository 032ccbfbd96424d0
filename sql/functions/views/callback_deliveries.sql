-- callback_deliveries: every callback of the network, newest first, without its
-- payload: its state (PENDING, SENT, DEAD, REFUSED: no registered target,
-- NO_TARGET: the movement named no callback_url, written by earlier versions
-- only), the target, how many
-- attempts, when the next is due, what the last said. `qtg callbacks list`
-- reads it.
CREATE OR REPLACE VIEW callback_deliveries AS
SELECT o.id AS callback_id,
       o.request_id AS movement_id,
       o.event_type,
       o.delivery_state,
       coalesce(o.target_name, t.target_name) AS target_name,
       o.target_url,
       o.attempts,
       CASE WHEN o.delivery_state = 'PENDING' THEN o.next_attempt_at END AS next_attempt_at,
       o.claim_hash IS NOT NULL AND o.delivery_state = 'PENDING' AND o.next_attempt_at > clock() AS in_flight,
       o.last_attempt_at,
       o.last_status,
       o.last_error,
       o.idempotency_key,
       o.created_at,
       o.sent_at,
       o.dead_at
  FROM callback_outbox o
  LEFT JOIN callback_targets t ON t.url = o.target_url;
