-- lane_of: a lane's pacing row (lane_baselines), or the 'default' lane's when
-- the lane has none. Internal; the one place that fallback is decided.
CREATE OR REPLACE FUNCTION lane_of(p_lane text) RETURNS lane_baselines
LANGUAGE sql STABLE
AS $$
    SELECT *
      FROM lane_baselines
     WHERE lane IN (p_lane, 'default')
     ORDER BY lane = p_lane DESC
     LIMIT 1;
$$;
