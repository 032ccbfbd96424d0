-- check_number: raises QT005 with number_problem's sentence (the call's
-- name, the value, its range, what was given) when a number is not finite
-- or not within [p_low, p_high] (p_low_open, p_high_open: exclusive), and
-- nothing changes. A NULL passes: a caller that needs a value checks it
-- first (QT002). Internal.
CREATE OR REPLACE FUNCTION check_number(
    p_call       text,
    p_what       text,
    p_value      numeric,
    p_low        numeric,
    p_high       numeric,
    p_low_open   boolean DEFAULT false,
    p_high_open  boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_problem text := number_problem(p_what, p_value, p_low, p_high, p_low_open, p_high_open);
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%: %', p_call, v_problem USING ERRCODE = 'QT005',
            HINT = 'Pass a finite number within the range; engine_limits holds the tunable bounds, which the admin login may change.';
    END IF;
END
$$;
