-- balance_change_low, balance_change_high: the least and the most an effect of
-- [p_low, p_high] (p_reversible: it may land and be undone before its node
-- finishes) changes a balance between a read that saw it p_before and one that
-- sees it p_after (balance_state):
--   C->C, N->N       0
--   N->C             the effect
--   N->U, U->C, U->U 0 or the effect   (U->U: or its reverse when reversible)
--   U->N             0                 (or its reverse when reversible)
--   anything else    its reverse, 0 or the effect (cannot happen while
--                    records only move on)
-- Inlined where they are called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION balance_change_low(
    p_before     text,
    p_after      text,
    p_low        numeric,
    p_high       numeric,
    p_reversible boolean
) RETURNS numeric
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_before = p_after THEN
                    CASE WHEN p_before = 'U' THEN
                             CASE WHEN p_reversible THEN least(0, p_low, -p_high) ELSE least(0, p_low) END
                         ELSE 0 END
                WHEN p_before = 'N' AND p_after = 'C' THEN p_low
                WHEN (p_before, p_after) IN (('N', 'U'), ('U', 'C')) THEN least(0, p_low)
                WHEN p_before = 'U' AND p_after = 'N' THEN
                    CASE WHEN p_reversible THEN least(0, -p_high) ELSE 0 END
                ELSE least(0, p_low, -p_high) END;
$$;
