-- heartbeat: upserts one worker instance's row (INSERT ... ON CONFLICT DO UPDATE
-- on worker_name + instance_id): last_tick_at, expected interval, live, the
-- last batch's size and the error counter. The stalled_workers view reads it.
-- When an instance beats for the first time (a worker started), instances
-- silent for longer than engine_limits.heartbeat_retention_seconds (stopped,
-- or dead long ago) are pruned, so the table does not grow with every
-- restart, and the table's bounds are kept: at most max_heartbeat_instances
-- instances of a worker name and max_heartbeat_workers names. Past one, the
-- new instance takes the place of the oldest dead ones (not live, or two
-- expected ticks missed: what recovery calls dead), and with none dead it
-- is refused (QT005): a runner login cannot fill the table with made-up
-- instances. First beats are serialised on an advisory lock (the table's
-- oid) so that concurrent ones count each other. A tick of a running
-- worker does no more than its upsert. The worker's name is check_worker's
-- (a worker's, never a person's: QT002); texts are bounded, and the
-- interval is a finite number of seconds from 0.01 to
-- engine_limits.max_wait_seconds (QT005); counts are not negative and a pid
-- is positive (QT002).
CREATE OR REPLACE FUNCTION heartbeat(
    p_worker_name               text,
    p_instance_id               text,
    p_tier                      text,
    p_expected_interval_seconds numeric,
    p_processed                 integer DEFAULT 0,
    p_consecutive_errors        integer DEFAULT 0,
    p_last_error                text DEFAULT NULL,
    p_host                      text DEFAULT NULL,
    p_pid                       integer DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now       timestamptz := clock();
    v_first     boolean;
    v_limits    engine_limits;
    v_instances bigint;    -- the instances of p_worker_name, this one included
    v_removed   bigint;
    v_workers   bigint;
BEGIN
    PERFORM check_read_committed('heartbeat');
    IF p_worker_name IS NULL OR btrim(p_worker_name) = '' OR p_instance_id IS NULL OR btrim(p_instance_id) = '' THEN
        RAISE EXCEPTION 'heartbeat needs a worker name and an instance id' USING ERRCODE = 'QT002';
    END IF;
    IF p_tier IS NULL OR p_tier NOT IN ('core', 'sidecar') THEN
        RAISE EXCEPTION 'heartbeat: tier must be core or sidecar, got %', coalesce(p_tier, 'NULL') USING ERRCODE = 'QT002';
    END IF;
    IF p_expected_interval_seconds IS NULL OR p_expected_interval_seconds <= 0 THEN
        RAISE EXCEPTION 'heartbeat: expected interval must be positive' USING ERRCODE = 'QT002';
    END IF;
    IF p_processed < 0 OR p_consecutive_errors < 0 OR p_pid <= 0 THEN
        RAISE EXCEPTION 'heartbeat: counts must not be negative and a pid must be positive (processed %, errors %, pid %)',
                        p_processed, p_consecutive_errors, p_pid
            USING ERRCODE = 'QT002', HINT = 'Report the last batch''s size, the errors in a row and the process id.';
    END IF;
    -- stalled_workers doubles the interval: a finite one of a centisecond to max_wait_seconds
    PERFORM check_number('heartbeat', 'the expected interval (seconds)', p_expected_interval_seconds,
                         0.01, (SELECT max_wait_seconds FROM engine_limits));
    PERFORM check_worker('heartbeat', p_worker_name);
    PERFORM check_limits('heartbeat', p_text => ARRAY[p_instance_id, p_last_error, p_host]);

    INSERT INTO worker_heartbeats AS hb (worker_name, instance_id, tier, expected_interval_seconds, live, host, pid,
                                         started_at, last_tick_at, ticks, last_processed, consecutive_errors, last_error)
    VALUES (p_worker_name, p_instance_id, p_tier, make_interval(secs => p_expected_interval_seconds::double precision),
            true, p_host, p_pid,
            v_now, v_now, 1, coalesce(p_processed, 0), coalesce(p_consecutive_errors, 0), p_last_error)
    ON CONFLICT (worker_name, instance_id) DO UPDATE
       SET tier                      = excluded.tier,
           expected_interval_seconds = excluded.expected_interval_seconds,
           live                      = true,
           host                      = coalesce(excluded.host, hb.host),
           pid                       = coalesce(excluded.pid, hb.pid),
           last_tick_at              = excluded.last_tick_at,
           ticks                     = hb.ticks + 1,
           last_processed            = excluded.last_processed,
           consecutive_errors        = excluded.consecutive_errors,
           last_error                = excluded.last_error
    RETURNING hb.ticks = 1 INTO v_first;

    IF NOT v_first THEN
        RETURN;
    END IF;
    SELECT * INTO STRICT v_limits FROM engine_limits;
    PERFORM pg_advisory_xact_lock('worker_heartbeats'::regclass::oid::bigint);
    DELETE FROM worker_heartbeats
     WHERE last_tick_at < v_now - make_interval(secs => v_limits.heartbeat_retention_seconds::double precision);

    -- the instances of this worker name: the oldest dead ones make room
    SELECT count(*) INTO v_instances FROM worker_heartbeats WHERE worker_name = p_worker_name;
    IF v_instances > v_limits.max_heartbeat_instances THEN
        DELETE FROM worker_heartbeats hb
         WHERE hb.worker_name = p_worker_name
           AND hb.instance_id IN (
                SELECT d.instance_id
                  FROM worker_heartbeats d
                 WHERE d.worker_name = p_worker_name
                   AND d.instance_id <> p_instance_id
                   AND (NOT d.live OR v_now - d.last_tick_at > d.expected_interval_seconds * 2)
                 ORDER BY d.last_tick_at, d.instance_id
                 LIMIT v_instances - v_limits.max_heartbeat_instances);
        GET DIAGNOSTICS v_removed = ROW_COUNT;
        IF v_instances - v_removed > v_limits.max_heartbeat_instances THEN
            RAISE EXCEPTION 'heartbeat: worker % already has % live instances, the limit (engine_limits.max_heartbeat_instances)',
                            p_worker_name, v_limits.max_heartbeat_instances
                USING ERRCODE = 'QT005',
                      HINT = 'An instance is one runner process: reuse its instance id on each beat, and stop (worker_stopped) the ones that end.';
        END IF;
    END IF;

    -- the worker names: a new one takes the place of the names whose instances are all dead
    IF v_instances = 1 THEN
        SELECT count(DISTINCT worker_name) INTO v_workers FROM worker_heartbeats;
        IF v_workers > v_limits.max_heartbeat_workers THEN
            DELETE FROM worker_heartbeats hb
             WHERE hb.worker_name IN (
                    SELECT d.worker_name
                      FROM worker_heartbeats d
                     WHERE d.worker_name <> p_worker_name
                     GROUP BY d.worker_name
                    HAVING bool_and(NOT d.live OR v_now - d.last_tick_at > d.expected_interval_seconds * 2)
                     ORDER BY max(d.last_tick_at), d.worker_name
                     LIMIT v_workers - v_limits.max_heartbeat_workers);
            IF (SELECT count(DISTINCT worker_name) FROM worker_heartbeats) > v_limits.max_heartbeat_workers THEN
                RAISE EXCEPTION 'heartbeat: % worker names already have live instances, the limit (engine_limits.max_heartbeat_workers)',
                                v_limits.max_heartbeat_workers
                    USING ERRCODE = 'QT005',
                          HINT = 'Name each worker as the runner registers it (node_dispatcher, ...): an instance id tells its processes apart.';
            END IF;
        END IF;
    END IF;
END
$$;
