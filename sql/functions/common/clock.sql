-- qtg.clock(): the only source of time for every procedure.
--
-- Returns the start time of the current client statement, unless the session
-- pins the clock with `SET qtg.now = '2026-01-01 00:00:00+00'` (tests, drills):
-- then it returns that value, so pacing, expiry and staleness can be driven
-- without sleeping. `RESET qtg.now` (or an empty value) returns to real time.
CREATE OR REPLACE FUNCTION clock() RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_pinned text := current_setting('qtg.now', true);
BEGIN
    IF v_pinned IS NULL OR v_pinned = '' THEN
        RETURN statement_timestamp();
    END IF;
    RETURN v_pinned::timestamptz;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
    RAISE EXCEPTION 'qtg.now is set to %, which is not a timestamp', quote_literal(v_pinned)
        USING ERRCODE = 'QT002',
              HINT = 'SET qtg.now to an ISO timestamp such as ''2026-01-01 00:00:00+00'', or RESET qtg.now.';
END
$$;
