-- notify_work: wakes idle runners of this network early (channel
-- qtg_<network>_work). Polling stays the source of truth: a lost notification
-- only delays work until the next poll. Payload is the kind of work
-- ('ready', 'approved'); PostgreSQL folds duplicates within a transaction.
CREATE OR REPLACE FUNCTION notify_work(p_kind text) RETURNS void
LANGUAGE sql
AS $$
    SELECT pg_notify('qtg_' || current_schema() || '_work', p_kind);
$$;
