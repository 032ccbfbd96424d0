-- dead_callbacks: the dead letters: callbacks that will not be sent unless an
-- operator replays them (replay_callback, `qtg callbacks replay ID`): DEAD
-- (max_attempts spent, or past max_age_seconds) and REFUSED (no enabled target
-- registered with the url), with the last error and how long ago.
CREATE OR REPLACE VIEW dead_callbacks AS
SELECT o.id AS callback_id,
       o.request_id AS movement_id,
       o.event_type,
       o.delivery_state,
       o.target_url,
       o.target_name,
       o.attempts,
       o.last_status,
       o.last_error,
       o.idempotency_key,
       o.created_at,
       o.dead_at,
       clock() - o.dead_at AS dead_for
  FROM callback_outbox o
 WHERE o.delivery_state IN ('DEAD', 'REFUSED');
