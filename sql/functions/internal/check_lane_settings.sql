-- check_lane_settings: the bounds of a lane's pacing and retry settings, for
-- a lane proposal (check_proposal, with every setting and the network's
-- engine_limits.min_poll_seconds as the floor) and for the owner's deploy
-- step (upsert_lane_baseline, with the settings it changes and a floor of 0:
-- the demo and the tests pace lanes faster than a second). Raises, and
-- nothing changes:
--   QT002  a lane name that is not 1 to 200 characters
--   QT005  a setting that is not a finite number within its bound (NaN and
--          Infinity are beyond every bound), or not 0 but under a microsecond
--          (0.000001: pacing ends in timestamps, and a smaller number is not
--          even a double); the message states the bound:
--       setting                       bound
--       baseline_seconds              (0, max_baseline_seconds]          (a day)
--       min_poll_seconds              [floor, max_wait_seconds]          (1 s, 1 h)
--       max_poll_seconds              [floor, max_wait_seconds], >= min_poll_seconds
--       first_poll_fraction           (0, 1]
--       poll_fraction                 (0, 1]
--       over_factor                   [1, 1000]
--       fatal_factor                  (1, 1000], > over_factor
--       observe_error_retry_seconds,
--       recovery_retry_seconds,
--       release_retry_seconds         [floor, max_wait_seconds] ((0, ...] for a floor of 0)
-- With p_partial a setting p_value leaves out is not checked (it keeps its
-- value), and the two settings compared with each other only when both are
-- given; otherwise a missing setting is refused. Internal.
CREATE OR REPLACE FUNCTION check_lane_settings(
    p_call    text,
    p_lane    text,
    p_value   jsonb,
    p_floor   numeric,
    p_partial boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_limits engine_limits;
    v_bound  record;
    v_value  jsonb;
    v_number numeric;
BEGIN
    SELECT * INTO STRICT v_limits FROM engine_limits;
    IF p_lane IS NULL OR btrim(p_lane) = '' OR length(p_lane) > 200 THEN
        RAISE EXCEPTION '%: a lane name must be 1 to 200 characters, got %', p_call,
                        coalesce(quote_literal(left(p_lane, 40)), 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Name the lane as node configs name it, e.g. cctp_fast.';
    END IF;
    FOR v_bound IN
        SELECT b.setting, b.low, b.low_open, b.high
          FROM (VALUES ('baseline_seconds',            0::numeric, true,          v_limits.max_baseline_seconds),
                       ('min_poll_seconds',            p_floor,    false,         v_limits.max_wait_seconds),
                       ('max_poll_seconds',            p_floor,    false,         v_limits.max_wait_seconds),
                       ('first_poll_fraction',         0,          true,          1),
                       ('poll_fraction',               0,          true,          1),
                       ('over_factor',                 1,          false,         1000),
                       ('fatal_factor',                1,          true,          1000),
                       ('observe_error_retry_seconds', p_floor,    p_floor <= 0,  v_limits.max_wait_seconds),
                       ('recovery_retry_seconds',      p_floor,    p_floor <= 0,  v_limits.max_wait_seconds),
                       ('release_retry_seconds',       p_floor,    p_floor <= 0,  v_limits.max_wait_seconds))
               AS b(setting, low, low_open, high)
    LOOP
        v_value := p_value -> v_bound.setting;
        CONTINUE WHEN p_partial AND v_value IS NULL;
        v_number := CASE WHEN jsonb_typeof(v_value) = 'number' THEN (v_value #>> '{}')::numeric END;
        IF v_number IS NULL
           OR v_number < v_bound.low OR (v_bound.low_open AND v_number = v_bound.low)
           OR v_number > v_bound.high THEN
            RAISE EXCEPTION '%: lane %: % must be a number in %, got %', p_call, p_lane, v_bound.setting,
                            format('%s%s, %s]', CASE WHEN v_bound.low_open THEN '(' ELSE '[' END,
                                   v_bound.low, v_bound.high),
                            coalesce(left(v_value::text, 40), 'nothing')
                USING ERRCODE = 'QT005',
                      HINT = 'The bounds of a lane are in check_lane_settings and engine_limits; the admin login may change the latter.';
        END IF;
        IF v_number > 0 AND v_number < 0.000001 THEN
            RAISE EXCEPTION '%: lane %: % must be 0 or at least 0.000001, got %', p_call, p_lane, v_bound.setting,
                            left(v_value::text, 40)
                USING ERRCODE = 'QT005',
                      HINT = 'Pacing is computed in microseconds (the clock''s resolution): a smaller number is not even a double.';
        END IF;
    END LOOP;
    IF (p_value ->> 'max_poll_seconds')::numeric < (p_value ->> 'min_poll_seconds')::numeric THEN
        RAISE EXCEPTION '%: lane %: max_poll_seconds (%) must be at least min_poll_seconds (%)', p_call, p_lane,
                        p_value ->> 'max_poll_seconds', p_value ->> 'min_poll_seconds'
            USING ERRCODE = 'QT005';
    END IF;
    IF (p_value ->> 'fatal_factor')::numeric <= (p_value ->> 'over_factor')::numeric THEN
        RAISE EXCEPTION '%: lane %: fatal_factor (%) must be greater than over_factor (%)', p_call, p_lane,
                        p_value ->> 'fatal_factor', p_value ->> 'over_factor'
            USING ERRCODE = 'QT005';
    END IF;
END
$$;
