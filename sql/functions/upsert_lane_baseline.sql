-- upsert_lane_baseline: sets a lane's pacing parameters (see observe_pacing).
-- Parameters left NULL keep their current (or default) value.
CREATE OR REPLACE FUNCTION upsert_lane_baseline(
    p_lane                text,
    p_baseline_seconds    numeric,
    p_min_poll_seconds    numeric DEFAULT NULL,
    p_max_poll_seconds    numeric DEFAULT NULL,
    p_first_poll_fraction numeric DEFAULT NULL,
    p_poll_fraction       numeric DEFAULT NULL,
    p_over_factor         numeric DEFAULT NULL,
    p_fatal_factor        numeric DEFAULT NULL
) RETURNS lane_baselines
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_row lane_baselines;
BEGIN
    IF p_lane IS NULL OR btrim(p_lane) = '' THEN
        RAISE EXCEPTION 'lane name must not be empty' USING ERRCODE = 'QT002';
    END IF;
    IF p_baseline_seconds IS NULL OR p_baseline_seconds <= 0 THEN
        RAISE EXCEPTION 'baseline for lane % must be positive, got %', p_lane, p_baseline_seconds USING ERRCODE = 'QT002';
    END IF;
    BEGIN
        INSERT INTO lane_baselines AS lb (lane, baseline_seconds, min_poll_seconds, max_poll_seconds,
                                          first_poll_fraction, poll_fraction, over_factor, fatal_factor, updated_at)
        VALUES (p_lane, p_baseline_seconds, coalesce(p_min_poll_seconds, 1), coalesce(p_max_poll_seconds, 300),
                coalesce(p_first_poll_fraction, 0.7), coalesce(p_poll_fraction, 0.1), coalesce(p_over_factor, 2),
                coalesce(p_fatal_factor, 10), clock())
        ON CONFLICT (lane) DO UPDATE
           SET baseline_seconds    = excluded.baseline_seconds,
               min_poll_seconds    = coalesce(p_min_poll_seconds, lb.min_poll_seconds),
               max_poll_seconds    = coalesce(p_max_poll_seconds, lb.max_poll_seconds),
               first_poll_fraction = coalesce(p_first_poll_fraction, lb.first_poll_fraction),
               poll_fraction       = coalesce(p_poll_fraction, lb.poll_fraction),
               over_factor         = coalesce(p_over_factor, lb.over_factor),
               fatal_factor        = coalesce(p_fatal_factor, lb.fatal_factor),
               updated_at          = excluded.updated_at
        RETURNING * INTO v_row;
    EXCEPTION WHEN check_violation THEN
        RAISE EXCEPTION 'lane % pacing parameters are inconsistent: %', p_lane, SQLERRM USING ERRCODE = 'QT002',
            HINT = 'Fractions are in (0, 1], fatal_factor > over_factor >= 1, max_poll >= min_poll >= 0.';
    END;
    PERFORM write_audit(session_user, 'lane', p_lane, NULL, 'baseline_set', NULL, NULL, to_jsonb(v_row));
    RETURN v_row;
END
$$;

COMMENT ON FUNCTION upsert_lane_baseline IS 'access: operator';
