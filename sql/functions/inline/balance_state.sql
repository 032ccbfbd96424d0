-- balance_state: a node's effect on an account as a balance read over the
-- window [p_start, p_end] sees it (balance_expectations):
--   'C'  certainly landed: certain before the window starts
--   'N'  certainly not (yet): void before the window starts, or it cannot have
--        started before the window ended
--   'U'  uncertain: it may or may not be in the balance
-- Inlined where it is called (sql/functions/inline/).
CREATE OR REPLACE FUNCTION balance_state(
    p_certain_at   timestamptz,
    p_void_at      timestamptz,
    p_may_start_at timestamptz,
    p_start        timestamptz,
    p_end          timestamptz
) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_certain_at < p_start THEN 'C'
                WHEN p_void_at < p_start THEN 'N'
                WHEN p_may_start_at <= p_end THEN 'U'
                ELSE 'N' END;
$$;
