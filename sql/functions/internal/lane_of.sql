-- lane_of: a lane's pacing row (lane_baselines), or the 'default' lane's when
-- the lane has none. Internal; the one place that fallback is decided.
-- PL/pgSQL rather than SQL: its query plan is cached for the session, and it
-- runs once for every node a batch reports (SQL functions are not inlined
-- here: the installer pins their search_path).
CREATE OR REPLACE FUNCTION lane_of(p_lane text) RETURNS lane_baselines
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_lane lane_baselines;
BEGIN
    SELECT * INTO v_lane
      FROM lane_baselines
     WHERE lane IN (p_lane, 'default')
     ORDER BY lane = p_lane DESC
     LIMIT 1;
    RETURN v_lane;
END
$$;
