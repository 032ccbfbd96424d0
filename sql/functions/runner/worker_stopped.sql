-- worker_stopped: marks a worker instance not live after a clean shutdown, so
-- the stalled_workers view does not report it.
CREATE OR REPLACE FUNCTION worker_stopped(p_worker_name text, p_instance_id text) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM check_read_committed('worker_stopped');
    UPDATE worker_heartbeats SET live = false, last_tick_at = clock()
     WHERE worker_name = p_worker_name AND instance_id = p_instance_id;
    RETURN FOUND;
END
$$;
