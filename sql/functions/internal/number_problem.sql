-- number_problem: what is wrong with a number an input or a setting gives,
-- as a sentence (NULL when nothing is, and for a NULL value: a caller that
-- needs a value says so itself). A number must be finite (PostgreSQL's
-- numeric also holds NaN, which passes every "> x" comparison, and
-- +-Infinity) and within [p_low, p_high]; p_low_open and p_high_open make
-- a bound exclusive. The sentence names the value (p_what), its range and
-- what was given. Internal; check_number raises it (QT005).
CREATE OR REPLACE FUNCTION number_problem(
    p_what       text,
    p_value      numeric,
    p_low        numeric,
    p_high       numeric,
    p_low_open   boolean DEFAULT false,
    p_high_open  boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_value IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_value IN ('NaN', 'Infinity', '-Infinity')
       OR p_value < p_low OR (p_low_open AND p_value = p_low)
       OR p_value > p_high OR (p_high_open AND p_value = p_high) THEN
        RETURN format('%s must be a finite number in %s%s, %s%s, got %s', p_what,
                      CASE WHEN p_low_open THEN '(' ELSE '[' END, p_low, p_high,
                      CASE WHEN p_high_open THEN ')' ELSE ']' END,
                      CASE WHEN length(p_value::text) > 40 THEN left(p_value::text, 20) || '...' ELSE p_value::text END);
    END IF;
    RETURN NULL;
END
$$;
