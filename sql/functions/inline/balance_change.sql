-- balance_change: the least and the most (an array of two) an effect of
-- [p_low, p_high] (p_reversible: it may land and be undone before its node
-- finishes) changes a balance between a read that saw it p_before and one that
-- sees it p_after (balance_state):
--   C->C, N->N       0
--   N->C             the effect
--   N->U, U->C, U->U 0 or the effect   (U->U: or its reverse when reversible)
--   U->N             0                 (or its reverse when reversible)
--   anything else    its reverse, 0 or the effect (cannot happen while
--                    records only move on)
-- Inlined where it is called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION balance_change(
    p_before     text,
    p_after      text,
    p_low        numeric,
    p_high       numeric,
    p_reversible boolean
) RETURNS numeric[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_before = p_after AND p_before = 'U' AND p_reversible
                    THEN ARRAY[least(0, p_low, -p_high), greatest(0, p_high, -p_low)]
                WHEN p_before = p_after AND p_before = 'U'
                    THEN ARRAY[least(0, p_low), greatest(0, p_high)]
                WHEN p_before = p_after
                    THEN ARRAY[0, 0]::numeric[]
                WHEN p_before = 'N' AND p_after = 'C'
                    THEN ARRAY[p_low, p_high]
                WHEN (p_before, p_after) IN (('N', 'U'), ('U', 'C'))
                    THEN ARRAY[least(0, p_low), greatest(0, p_high)]
                WHEN p_before = 'U' AND p_after = 'N' AND p_reversible
                    THEN ARRAY[least(0, -p_high), greatest(0, -p_low)]
                WHEN p_before = 'U' AND p_after = 'N'
                    THEN ARRAY[0, 0]::numeric[]
                ELSE ARRAY[least(0, p_low, -p_high), greatest(0, p_high, -p_low)] END;
$$;
