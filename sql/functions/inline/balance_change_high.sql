-- balance_change_high: the most an effect changes a balance between two reads
-- (balance_change_low says how each pair of states counts).
-- Inlined where it is called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION balance_change_high(
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
                             CASE WHEN p_reversible THEN greatest(0, p_high, -p_low) ELSE greatest(0, p_high) END
                         ELSE 0 END
                WHEN p_before = 'N' AND p_after = 'C' THEN p_high
                WHEN (p_before, p_after) IN (('N', 'U'), ('U', 'C')) THEN greatest(0, p_high)
                WHEN p_before = 'U' AND p_after = 'N' THEN
                    CASE WHEN p_reversible THEN greatest(0, -p_low) ELSE 0 END
                ELSE greatest(0, p_high, -p_low) END;
$$;
