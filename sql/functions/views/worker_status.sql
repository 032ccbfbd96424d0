-- worker_status: every worker instance with its last tick and whether it is
-- healthy, stalled (missed two ticks) or stopped.
CREATE OR REPLACE VIEW worker_status AS
SELECT worker_name,
       instance_id,
       tier,
       host,
       pid,
       started_at,
       last_tick_at,
       expected_interval_seconds,
       ticks,
       last_processed,
       consecutive_errors,
       last_error,
       CASE
           WHEN NOT live THEN 'stopped'
           WHEN clock() - last_tick_at > expected_interval_seconds * 2 THEN 'stalled'
           WHEN consecutive_errors > 0 THEN 'erroring'
           ELSE 'healthy'
       END AS status
  FROM worker_heartbeats;
