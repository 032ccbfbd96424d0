-- callback_backlog: per target, the callbacks not delivered: PENDING (of which
-- due now, and attempted at least once) with the oldest one's age, and the dead
-- letters (DEAD, REFUSED) an operator may replay. Rows of a url no target has
-- are under '(unregistered)'. Reads only the undelivered rows (the partial
-- indexes of PENDING and of DEAD/REFUSED), never the SENT history. `qtg status`
-- shows it.
CREATE OR REPLACE VIEW callback_backlog AS
SELECT coalesce(o.target_name, t.target_name, '(unregistered)') AS target_name,
       count(*) FILTER (WHERE o.delivery_state = 'PENDING') AS pending,
       count(*) FILTER (WHERE o.delivery_state = 'PENDING' AND o.next_attempt_at <= clock()) AS due_now,
       count(*) FILTER (WHERE o.delivery_state = 'PENDING' AND o.attempts > 0) AS attempted,
       clock() - min(o.created_at) FILTER (WHERE o.delivery_state = 'PENDING') AS oldest_pending_for,
       count(*) FILTER (WHERE o.delivery_state = 'DEAD') AS dead,
       count(*) FILTER (WHERE o.delivery_state = 'REFUSED') AS refused
  FROM callback_outbox o
  LEFT JOIN callback_targets t ON t.url = o.target_url
 WHERE o.delivery_state IN ('PENDING', 'DEAD', 'REFUSED')
 GROUP BY 1;
