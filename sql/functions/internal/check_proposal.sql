-- check_proposal: the bounds a configuration proposal must keep, checked when
-- it is made (propose_*) and again when it is approved (approve_proposal), so
-- that a bound tightened in between holds. Raises, and nothing changes.
--
--   lane_baseline    a lane name of 1 to 200 characters (QT002); every
--                    setting a finite number within its bound (QT005,
--                    the message states the bound; NaN and Infinity are
--                    beyond every bound); engine_limits holds the tunable ones:
--       setting                       bound
--       baseline_seconds              (0, max_baseline_seconds]          (a day)
--       min_poll_seconds              [min_poll_seconds, max_wait_seconds] (1 s, 1 h)
--       max_poll_seconds              [min_poll_seconds, max_wait_seconds], >= the lane's min_poll
--       first_poll_fraction           (0, 1]
--       poll_fraction                 (0, 1]
--       over_factor                   [1, 1000]
--       fatal_factor                  (1, 1000], > over_factor
--       observe_error_retry_seconds,
--       recovery_retry_seconds,
--       release_retry_seconds         [min_poll_seconds, max_wait_seconds]
--   template         check_template: the plan as create_movement checks one
--                    (QT001), its size (QT005), the name (QT002)
--   executor_config  the executor registered (QT012), check_executor_schema
--                    (QT002/QT005)
-- Internal.
CREATE OR REPLACE FUNCTION check_proposal(
    p_call    text,
    p_kind    qtg.proposal_kind,
    p_subject text,
    p_value   jsonb
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
    CASE p_kind
        WHEN 'lane_baseline' THEN
            IF p_subject IS NULL OR btrim(p_subject) = '' OR length(p_subject) > 200 THEN
                RAISE EXCEPTION '%: a lane name must be 1 to 200 characters, got %', p_call,
                                coalesce(quote_literal(left(p_subject, 40)), 'NULL')
                    USING ERRCODE = 'QT002';
            END IF;
            FOR v_bound IN
                SELECT b.setting, b.low, b.low_open, b.high
                  FROM (VALUES ('baseline_seconds',            0::numeric,              true,  v_limits.max_baseline_seconds),
                               ('min_poll_seconds',            v_limits.min_poll_seconds, false, v_limits.max_wait_seconds),
                               ('max_poll_seconds',            v_limits.min_poll_seconds, false, v_limits.max_wait_seconds),
                               ('first_poll_fraction',         0,                       true,  1),
                               ('poll_fraction',               0,                       true,  1),
                               ('over_factor',                 1,                       false, 1000),
                               ('fatal_factor',                1,                       true,  1000),
                               ('observe_error_retry_seconds', v_limits.min_poll_seconds, false, v_limits.max_wait_seconds),
                               ('recovery_retry_seconds',      v_limits.min_poll_seconds, false, v_limits.max_wait_seconds),
                               ('release_retry_seconds',       v_limits.min_poll_seconds, false, v_limits.max_wait_seconds))
                       AS b(setting, low, low_open, high)
            LOOP
                v_value := p_value -> v_bound.setting;
                v_number := CASE WHEN jsonb_typeof(v_value) = 'number' THEN (v_value #>> '{}')::numeric END;
                IF v_number IS NULL
                   OR v_number < v_bound.low OR (v_bound.low_open AND v_number = v_bound.low)
                   OR v_number > v_bound.high THEN
                    RAISE EXCEPTION '%: lane %: % must be a number in %, got %', p_call, p_subject, v_bound.setting,
                                    format('%s%s, %s]', CASE WHEN v_bound.low_open THEN '(' ELSE '[' END,
                                           v_bound.low, v_bound.high),
                                    coalesce(v_value::text, 'nothing')
                        USING ERRCODE = 'QT005',
                              HINT = 'The bounds of a proposal are in check_proposal and engine_limits; the admin login may change the latter.';
                END IF;
            END LOOP;
            IF (p_value ->> 'max_poll_seconds')::numeric < (p_value ->> 'min_poll_seconds')::numeric THEN
                RAISE EXCEPTION '%: lane %: max_poll_seconds (%) must be at least min_poll_seconds (%)', p_call, p_subject,
                                p_value ->> 'max_poll_seconds', p_value ->> 'min_poll_seconds'
                    USING ERRCODE = 'QT005';
            END IF;
            IF (p_value ->> 'fatal_factor')::numeric <= (p_value ->> 'over_factor')::numeric THEN
                RAISE EXCEPTION '%: lane %: fatal_factor (%) must be greater than over_factor (%)', p_call, p_subject,
                                p_value ->> 'fatal_factor', p_value ->> 'over_factor'
                    USING ERRCODE = 'QT005';
            END IF;
        WHEN 'template' THEN
            PERFORM check_template(p_call, p_subject, p_value -> 'plan', p_value ->> 'description');
        WHEN 'executor_config' THEN
            IF NOT EXISTS (SELECT 1 FROM executors WHERE executor_key = p_subject) THEN
                RAISE EXCEPTION '%: executor % is not registered', p_call, coalesce(p_subject, 'NULL') USING ERRCODE = 'QT012',
                    HINT = 'SELECT executor_key FROM executors lists the registered executors; registering one is an admin step.';
            END IF;
            PERFORM check_executor_schema(p_call, p_subject, p_value -> 'node_config_schema', p_value ->> 'description');
    END CASE;
END
$$;
