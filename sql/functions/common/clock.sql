-- qtg.clock(): the only source of time for every procedure.
--
-- Returns the start time of the current client statement. In a database its
-- owner marked as a test database (a row in qtg.test_database: `qtg db
-- mark-test`), a session may pin the clock with `SET qtg.now = '2026-01-01
-- 00:00:00+00'` (tests, drills): it then returns that value, so pacing, expiry
-- and staleness can be driven without sleeping; `RESET qtg.now` (or an empty
-- value) returns to real time. Anywhere else a pinned clock is refused
-- (QT040): no caller moves the time that leases, expiry, approvals and audit
-- timestamps read.
CREATE OR REPLACE FUNCTION clock() RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_pinned text := current_setting('qtg.now', true);
BEGIN
    IF v_pinned IS NULL OR v_pinned = '' THEN
        RETURN statement_timestamp();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM qtg.test_database) THEN
        RAISE EXCEPTION 'qtg.now is set to %, but this is not a test database: its clock cannot be pinned',
                        quote_literal(v_pinned)
            USING ERRCODE = 'QT040',
                  HINT = 'RESET qtg.now. Only a database its owner marked as a test database (qtg db mark-test) honours a pinned clock.';
    END IF;
    RETURN v_pinned::timestamptz;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
    RAISE EXCEPTION 'qtg.now is set to %, which is not a timestamp', quote_literal(v_pinned)
        USING ERRCODE = 'QT002',
              HINT = 'SET qtg.now to an ISO timestamp such as ''2026-01-01 00:00:00+00'', or RESET qtg.now.';
END
$$;
