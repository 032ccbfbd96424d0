-- stalled_workers: live worker instances that missed two expected ticks (the
-- seed's query). A worker that shut down cleanly is not live and not listed.
CREATE OR REPLACE VIEW stalled_workers AS
SELECT worker_name,
       instance_id,
       tier,
       host,
       pid,
       last_tick_at,
       expected_interval_seconds,
       clock() - last_tick_at AS silent_for,
       consecutive_errors,
       last_error
  FROM worker_heartbeats
 WHERE live
   AND clock() - last_tick_at > expected_interval_seconds * 2;
