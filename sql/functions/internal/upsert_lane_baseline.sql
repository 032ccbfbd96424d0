-- upsert_lane_baseline: sets a lane's pacing parameters (see observe_pacing)
-- and the waits after errors on it (observe_error_retry_seconds after a failed
-- observe call, recovery_retry_seconds after recover() found no conclusion,
-- release_retry_seconds after a runner gave a claim back). Parameters left NULL
-- keep their current value (a new lane: the table's defaults). Audited.
-- Internal: the apply step of an approved lane proposal (approve_proposal,
-- which passes every parameter), and a deploy step for the owner (the admin
-- login: the demo sets its lanes so), who may call it directly. Operators
-- change a lane through propose_lane_baseline and a second operator's
-- approve_proposal, within the bounds check_proposal keeps; here each
-- setting given is checked by check_lane_settings with a floor of 0 (finite,
-- within engine_limits: QT005; the demo paces lanes faster than a second),
-- and the row as a whole by the table (QT002: e.g. a max_poll_seconds under
-- the lane's min_poll_seconds).
CREATE OR REPLACE FUNCTION upsert_lane_baseline(
    p_lane                text,
    p_baseline_seconds    numeric,
    p_min_poll_seconds    numeric DEFAULT NULL,
    p_max_poll_seconds    numeric DEFAULT NULL,
    p_first_poll_fraction numeric DEFAULT NULL,
    p_poll_fraction       numeric DEFAULT NULL,
    p_over_factor         numeric DEFAULT NULL,
    p_fatal_factor        numeric DEFAULT NULL,
    p_observe_error_retry_seconds numeric DEFAULT NULL,
    p_recovery_retry_seconds      numeric DEFAULT NULL,
    p_release_retry_seconds       numeric DEFAULT NULL
) RETURNS lane_baselines
LANGUAGE plpgsql
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
    -- each setting given: finite and within its bound (QT005), below a second allowed
    PERFORM check_lane_settings('upsert_lane_baseline', p_lane, jsonb_strip_nulls(jsonb_build_object(
               'baseline_seconds', p_baseline_seconds,
               'min_poll_seconds', p_min_poll_seconds,
               'max_poll_seconds', p_max_poll_seconds,
               'first_poll_fraction', p_first_poll_fraction,
               'poll_fraction', p_poll_fraction,
               'over_factor', p_over_factor,
               'fatal_factor', p_fatal_factor,
               'observe_error_retry_seconds', p_observe_error_retry_seconds,
               'recovery_retry_seconds', p_recovery_retry_seconds,
               'release_retry_seconds', p_release_retry_seconds)), 0, p_partial => true);
    BEGIN
        INSERT INTO lane_baselines (lane, baseline_seconds, updated_at)
        VALUES (p_lane, p_baseline_seconds, clock())
        ON CONFLICT (lane) DO NOTHING;
        UPDATE lane_baselines lb
           SET baseline_seconds            = p_baseline_seconds,
               min_poll_seconds            = coalesce(p_min_poll_seconds, lb.min_poll_seconds),
               max_poll_seconds            = coalesce(p_max_poll_seconds, lb.max_poll_seconds),
               first_poll_fraction         = coalesce(p_first_poll_fraction, lb.first_poll_fraction),
               poll_fraction               = coalesce(p_poll_fraction, lb.poll_fraction),
               over_factor                 = coalesce(p_over_factor, lb.over_factor),
               fatal_factor                = coalesce(p_fatal_factor, lb.fatal_factor),
               observe_error_retry_seconds = coalesce(p_observe_error_retry_seconds, lb.observe_error_retry_seconds),
               recovery_retry_seconds      = coalesce(p_recovery_retry_seconds, lb.recovery_retry_seconds),
               release_retry_seconds       = coalesce(p_release_retry_seconds, lb.release_retry_seconds),
               updated_at                  = clock()
         WHERE lb.lane = p_lane
        RETURNING * INTO v_row;
    EXCEPTION WHEN check_violation THEN
        RAISE EXCEPTION 'lane % pacing parameters are inconsistent: %', p_lane, SQLERRM USING ERRCODE = 'QT002',
            HINT = 'Fractions are in (0, 1], fatal_factor > over_factor >= 1, max_poll >= min_poll >= 0, retry waits in (0, 86400].';
    END;
    PERFORM write_audit(ARRAY[(session_user, 'lane', p_lane, NULL, 'baseline_set', NULL, NULL, to_jsonb(v_row))::qtg.audit_event]);
    RETURN v_row;
END
$$;
