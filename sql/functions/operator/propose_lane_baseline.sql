-- propose_lane_baseline: (none) -> PROPOSED; a lane's pacing and retry
-- settings, to apply when a second operator approves (approve_proposal).
-- The settings are upsert_lane_baseline's: a setting left NULL keeps the
-- lane's value, or for a lane without a row the 'default' lane's (what the
-- lane paces as until then); the proposal holds all ten, beside the lane's
-- row as it is now (NULL for a new lane). Bounds: check_proposal (QT005,
-- e.g. a poll interval of at least 1 s, a baseline of at most a day, waits
-- within engine_limits; NaN and Infinity refused). The proposer is the
-- session's login. Returns the proposal. A newer proposal for the lane
-- supersedes an open one (open_proposal).
CREATE OR REPLACE FUNCTION propose_lane_baseline(
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
) RETURNS TABLE (proposal_id bigint, proposal_state qtg.proposal_state, expires_at timestamptz, supersedes bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_baseline_seconds IS NULL THEN
        RAISE EXCEPTION 'propose_lane_baseline: lane % needs a baseline', coalesce(p_lane, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    RETURN QUERY
    SELECT * FROM open_proposal(
        'propose_lane_baseline', 'lane_baseline', p_lane,
        jsonb_strip_nulls(jsonb_build_object(
               'baseline_seconds', p_baseline_seconds,
               'min_poll_seconds', p_min_poll_seconds,
               'max_poll_seconds', p_max_poll_seconds,
               'first_poll_fraction', p_first_poll_fraction,
               'poll_fraction', p_poll_fraction,
               'over_factor', p_over_factor,
               'fatal_factor', p_fatal_factor,
               'observe_error_retry_seconds', p_observe_error_retry_seconds,
               'recovery_retry_seconds', p_recovery_retry_seconds,
               'release_retry_seconds', p_release_retry_seconds)));
END
$$;
