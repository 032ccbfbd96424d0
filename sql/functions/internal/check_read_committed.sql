-- check_read_committed: refuses (QT002, and nothing changes) a runner
-- procedure called in a transaction that is not READ COMMITTED. Each of
-- their statements must see what was committed before it: a REPEATABLE READ
-- or SERIALIZABLE transaction opened before an operator's pause, a breaker's
-- trip, a limit's change or a registry edit, and kept open, would decide from
-- the rows as they were (a claim past the pause and the limits, bytes
-- recorded on a route since withdrawn). Rows a procedure locks are safe at
-- any level; the rows it reads to decide are not. The first statement of
-- every procedure the runner role may call that writes. Internal.
CREATE OR REPLACE FUNCTION check_read_committed(p_call text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '% needs READ COMMITTED, not %', p_call, current_setting('transaction_isolation')
            USING ERRCODE = 'QT002',
                  HINT = 'Call it outside a REPEATABLE READ or SERIALIZABLE transaction: each of its statements must '
                         'see what was committed before it.';
    END IF;
END
$$;
