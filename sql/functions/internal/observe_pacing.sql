-- observe_pacing: when to observe a node next, from its lane's baseline and,
-- once the lane has learned its latency, from its learned schedule.
--
-- elapsed = p_now - p_started (time observing); ratio = elapsed / baseline.
--   pre_baseline   ratio < 1            wait for first_poll_fraction * baseline,
--                                       then poll every poll_fraction * baseline
--   at_baseline    1 <= ratio < over    every poll_fraction * baseline
--   over_baseline  over <= ratio < fatal  every poll_fraction * elapsed (backs off)
--   fatal          ratio >= fatal       no next poll: the node goes to UNKNOWN
-- These are the lane's phases. A lane with a learned schedule
-- (lane_pacing_learned, drawn by refresh_lane_pacing for the lane's current
-- settings) polls at its next learned time after elapsed instead, while there
-- is one; past the last (a node slower than the lane has been: degraded) the
-- phases take over from where the node is. The phase (and so fatal) is the
-- same either way. refresh_lane_pacing draws the learned k-th poll no earlier
-- than the phases' k-th, so a node never has more polls at any moment than the
-- phases would have made by then (see refresh_lane_pacing).
-- The delay is clamped to [min_poll, max_poll]. An executor's retry hint
-- replaces the computed delay (floored at min_poll, not capped: a rate limit
-- must be respected). Lanes without a row use the 'default' lane (and its
-- phases: a lane's learned schedule is its own).
-- Cost: the lane's row, one primary-key read of its learned row, a walk of at
-- most 64 numbers; no history is read here.
CREATE OR REPLACE FUNCTION observe_pacing(
    p_lane         text,
    p_started      timestamptz,
    p_now          timestamptz,
    p_hint_seconds numeric DEFAULT NULL
) RETURNS TABLE (phase qtg.observe_phase, next_observe_at timestamptz)
LANGUAGE plpgsql STABLE
ROWS 1
AS $$
DECLARE
    v_lane    lane_baselines;
    v_elapsed numeric := greatest(0, extract(epoch FROM p_now - p_started));
    v_ratio   numeric;
    v_delay   numeric;
    v_poll_at numeric[];
    v_at      numeric;
BEGIN
    v_lane := lane_of(p_lane);

    v_ratio := v_elapsed / v_lane.baseline_seconds;
    phase := CASE
                 WHEN v_ratio >= v_lane.fatal_factor THEN 'fatal'
                 WHEN v_ratio >= v_lane.over_factor THEN 'over_baseline'
                 WHEN v_ratio >= 1 THEN 'at_baseline'
                 ELSE 'pre_baseline'
             END;
    IF phase = 'fatal' THEN
        next_observe_at := NULL;
        RETURN NEXT;
        RETURN;
    END IF;

    v_delay := CASE phase
                   WHEN 'pre_baseline' THEN greatest(v_lane.baseline_seconds * v_lane.first_poll_fraction - v_elapsed,
                                                     v_lane.baseline_seconds * v_lane.poll_fraction)
                   WHEN 'at_baseline' THEN v_lane.baseline_seconds * v_lane.poll_fraction
                   ELSE v_elapsed * v_lane.poll_fraction
               END;

    IF v_lane.lane = p_lane THEN
        SELECT learned.poll_at INTO v_poll_at
          FROM lane_pacing_learned learned
         WHERE learned.lane = p_lane
           AND learned.lane_updated_at = v_lane.updated_at;
        FOREACH v_at IN ARRAY coalesce(v_poll_at, '{}') LOOP
            IF v_at > v_elapsed THEN
                v_delay := v_at - v_elapsed;
                EXIT;
            END IF;
        END LOOP;
    END IF;

    v_delay := least(greatest(v_delay, v_lane.min_poll_seconds), v_lane.max_poll_seconds);
    IF p_hint_seconds IS NOT NULL THEN
        v_delay := greatest(p_hint_seconds, v_lane.min_poll_seconds);
    END IF;

    next_observe_at := p_now + make_interval(secs => v_delay::double precision);
    RETURN NEXT;
END
$$;
