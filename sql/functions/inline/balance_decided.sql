-- balance_decided: an effect on a balance is decided before p_at: certain, or
-- void, before it (balance_state sees it the same, C or N, in every read that
-- starts from p_at on). False while neither is known.
-- Inlined where it is called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION balance_decided(p_certain_at timestamptz, p_void_at timestamptz, p_at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(p_certain_at < p_at, false) OR coalesce(p_void_at < p_at, false);
$$;
