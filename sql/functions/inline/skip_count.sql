-- skip_count: an account's nonces skipped in its day of skips
-- (evm_nonces.skipped_nonces since skipped_since) once a record skips
-- p_skip more: the day's count plus p_skip while the day runs (less than a
-- day since skipped_since: skip_day_runs), p_skip alone after it (a new day), and the
-- count as it is for a record that skips nothing (p_skip 0). NULL for a
-- record below the account's next nonce (p_skip negative): no count, and
-- record_intent_prepared_batch allocates nothing. Internal (inlined).
CREATE OR REPLACE FUNCTION skip_count(
    p_skipped integer,
    p_since   timestamptz,
    p_now     timestamptz,
    p_skip    bigint
) RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_skip < 0 THEN NULL
                WHEN p_skip = 0 THEN p_skipped
                WHEN skip_day_runs(p_since, p_now) THEN p_skipped + p_skip
                ELSE p_skip END;
$$;
