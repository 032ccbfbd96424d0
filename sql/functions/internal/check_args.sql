-- check_args: the argument checks the runner procedures share, each raising
-- QT002 with the call's name, and nothing changed. Internal. The caller names
-- what it takes:
--   p_max, p_max_limit       a batch size: 1 to p_max_limit
--   p_outcome, p_outcomes    an outcome: one of p_outcomes
--   p_retry_after            a wait, when given: not negative, within engine_limits
CREATE OR REPLACE FUNCTION check_args(
    p_call          text,
    p_max           integer DEFAULT NULL,
    p_max_limit     integer DEFAULT NULL,
    p_outcome       text DEFAULT NULL,
    p_outcomes      text[] DEFAULT NULL,
    p_retry_after   numeric DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_max_limit IS NOT NULL AND (p_max IS NULL OR p_max < 1 OR p_max > p_max_limit) THEN
        RAISE EXCEPTION '%: p_max must be between 1 and %, got %', p_call, p_max_limit, coalesce(p_max::text, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    IF p_outcomes IS NOT NULL AND (p_outcome IS NULL OR NOT p_outcome = ANY (p_outcomes)) THEN
        RAISE EXCEPTION '%: outcome must be one of %, got %', p_call, array_to_string(p_outcomes, ', '),
                        coalesce(p_outcome, 'NULL')
            USING ERRCODE = 'QT002';
    END IF;
    IF p_retry_after < 0 THEN
        RAISE EXCEPTION '%: retry_after_seconds must not be negative', p_call USING ERRCODE = 'QT002';
    END IF;
    PERFORM check_limits(p_call, p_wait => p_retry_after);
END
$$;
