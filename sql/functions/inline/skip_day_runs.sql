-- skip_day_runs: whether an account's day of skipped nonces that began at
-- p_since (evm_nonces.skipped_since) still runs at p_now: less than 24
-- hours since. NULL for an account that never skipped. Internal (inlined):
-- skip_count, record_intent_prepared_batch (evm_accounts writes it out:
-- its readers may call no engine routine).
CREATE OR REPLACE FUNCTION skip_day_runs(p_since timestamptz, p_now timestamptz) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_since > p_now - interval '24 hours';
$$;
