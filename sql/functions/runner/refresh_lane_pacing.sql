-- refresh_lane_pacing: each lane learns its poll schedule from its latency
-- samples (lane_latency_samples, left by complete_observe); the
-- lane_pacing_refresh sidecar calls it every minute. Per lane of lane_baselines:
--   fewer than 100 samples   its learned row goes: the lane paces by its phases
--   100 or more              from its newest 2,000 samples: the quantiles of its
--                            latency at levels q1 = 0.15, q(k+1) = 1 - 0.75 (1 - qk)
--                            (each poll expects to find a quarter of the nodes
--                            still pending done) up to 0.995, and one poll at each
-- Each sample says only that the node was done after its last look and by the
-- look that saw it: it counts as ten points spread evenly over that interval,
-- so a lane polled at its quantiles keeps learning the same quantiles.
-- The k-th learned poll is then moved no earlier than the phases' k-th poll
-- (the lane's phases walked from 0 with its own settings), at least
-- min_poll_seconds and at most max_poll_seconds after the one before, and
-- none at or past fatal: at any moment a node has had no more polls than the
-- phases would have given it, and a degraded node (past the last learned poll)
-- goes on by the phases from where it is, which cannot add polls either (see
-- observe_pacing). So learning moves polls to where the lane's nodes finish
-- and never polls a lane more often than its phases; a lane much faster than
-- its baseline needs a new baseline (propose_lane_baseline; lane_latency shows
-- it). The schedule is kept with the lane's updated_at: a change of its
-- settings sets it aside until the next refresh.
-- Samples beyond the newest 2,000 of a lane, and those of lanes without a row,
-- are deleted. Locks: each lane's learned row (upsert). Returns one row per lane.
CREATE OR REPLACE FUNCTION refresh_lane_pacing()
RETURNS TABLE (lane text, samples integer, learned boolean, poll_at numeric[])
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    c_min_samples CONSTANT integer := 100;
    c_window      CONSTANT integer := 2000;
    c_first_level CONSTANT numeric := 0.15;
    c_pending     CONSTANT numeric := 0.75;
    c_last_level  CONSTANT numeric := 0.995;
    c_spread      CONSTANT integer := 10;
    v_now       timestamptz := clock();
    v_lane      lane_baselines;
    v_n         integer;
    v_levels    numeric[];
    v_quantiles numeric[];
    v_poll_at   numeric[];
    v_level     numeric;
    v_q         numeric;
    v_grid      numeric;   -- the phases' poll times, walked from 0
    v_t         numeric;
    v_prev      numeric;
BEGIN
    PERFORM check_read_committed('refresh_lane_pacing');
    v_level := c_first_level;
    v_levels := '{}';
    WHILE v_level <= c_last_level LOOP
        v_levels := v_levels || round(v_level, 6);
        v_level := 1 - c_pending * (1 - v_level);
    END LOOP;

    DELETE FROM lane_latency_samples s
     WHERE NOT EXISTS (SELECT 1 FROM lane_baselines lb WHERE lb.lane = s.lane);

    FOR v_lane IN SELECT * FROM lane_baselines ORDER BY lane LOOP
        DELETE FROM lane_latency_samples s
         WHERE s.lane = v_lane.lane
           AND s.id < (SELECT newest.id FROM lane_latency_samples newest
                        WHERE newest.lane = v_lane.lane
                        ORDER BY newest.id DESC OFFSET c_window - 1 LIMIT 1);
        SELECT count(*) INTO v_n FROM lane_latency_samples s WHERE s.lane = v_lane.lane;

        IF v_n < c_min_samples THEN
            DELETE FROM lane_pacing_learned l WHERE l.lane = v_lane.lane;
            lane := v_lane.lane; samples := v_n; learned := false; poll_at := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;

        SELECT percentile_cont(v_levels::double precision[]) WITHIN GROUP (
                   ORDER BY (s.after_seconds + (s.by_seconds - s.after_seconds) * (g + 0.5) / c_spread)::double precision
               )::numeric[]
          INTO v_quantiles
          FROM lane_latency_samples s
         CROSS JOIN generate_series(0, c_spread - 1) g
         WHERE s.lane = v_lane.lane;

        v_poll_at := '{}';
        v_grid := 0;
        v_prev := 0;
        FOREACH v_q IN ARRAY v_quantiles LOOP
            -- the phases' next poll after v_grid (observe_pacing's rule)
            v_grid := v_grid + least(greatest(
                          CASE
                              WHEN v_grid < v_lane.baseline_seconds
                                  THEN greatest(v_lane.baseline_seconds * v_lane.first_poll_fraction - v_grid,
                                                v_lane.baseline_seconds * v_lane.poll_fraction)
                              WHEN v_grid < v_lane.baseline_seconds * v_lane.over_factor
                                  THEN v_lane.baseline_seconds * v_lane.poll_fraction
                              ELSE v_grid * v_lane.poll_fraction
                          END, v_lane.min_poll_seconds), v_lane.max_poll_seconds);
            v_t := least(greatest(round(v_q, 3), v_grid, v_prev + v_lane.min_poll_seconds),
                         v_prev + v_lane.max_poll_seconds);
            EXIT WHEN v_t >= v_lane.baseline_seconds * v_lane.fatal_factor;
            -- (equal only with min_poll 0: no poll added, and the phases' walk stays ahead)
            IF v_t > v_prev THEN
                v_poll_at := v_poll_at || v_t;
                v_prev := v_t;
            END IF;
        END LOOP;

        IF cardinality(v_poll_at) = 0 THEN
            DELETE FROM lane_pacing_learned l WHERE l.lane = v_lane.lane;
        ELSE
            INSERT INTO lane_pacing_learned AS l (lane, samples, quantile_levels, quantile_seconds, poll_at,
                                                   lane_updated_at, refreshed_at)
            VALUES (v_lane.lane, v_n, v_levels,
                    (SELECT array_agg(round(x, 3) ORDER BY o) FROM unnest(v_quantiles) WITH ORDINALITY AS u(x, o)), v_poll_at,
                    v_lane.updated_at, v_now)
            ON CONFLICT ON CONSTRAINT lane_pacing_learned_pkey DO UPDATE
               SET samples = EXCLUDED.samples, quantile_levels = EXCLUDED.quantile_levels,
                   quantile_seconds = EXCLUDED.quantile_seconds, poll_at = EXCLUDED.poll_at,
                   lane_updated_at = EXCLUDED.lane_updated_at, refreshed_at = EXCLUDED.refreshed_at;
        END IF;
        lane := v_lane.lane; samples := v_n; learned := cardinality(v_poll_at) > 0;
        poll_at := CASE WHEN cardinality(v_poll_at) > 0 THEN v_poll_at END;
        RETURN NEXT;
    END LOOP;
END
$$;
