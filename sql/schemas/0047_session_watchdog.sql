-- depends: 0046_reader_limits
--
-- end_stalled_sessions (sql/functions/runner) ends the sessions of a network's
-- logins that hold a transaction open past the engine's bounds, whatever
-- timeouts those sessions set for themselves: a login may SET its own
-- statement_timeout or idle_in_transaction_session_timeout to 0, or ALTER
-- ROLE itself, and a psycopg pipeline can leave a backend idle in a
-- transaction without its idle timer. It runs as qtg_owner, which needs to
-- see the other sessions' states (pg_read_all_stats) and to signal them
-- (pg_signal_backend: never a superuser's session). Granted when the admin
-- may grant them (a superuser); otherwise the procedure reports that it
-- cannot see or end them, and the admin grants them by hand.

DO $$
BEGIN
    GRANT pg_read_all_stats, pg_signal_backend TO qtg_owner;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'qtg_owner could not be granted pg_read_all_stats and pg_signal_backend: '
                 'grant them as a superuser for end_stalled_sessions to work';
END
$$;


-- an ended session is audited (entity 'session', its backend pid)
SET LOCAL ROLE qtg_owner;

CREATE OR REPLACE FUNCTION qtg_admin.audit_events_valid(p_events qtg.audit_event[]) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT cardinality(p_events) BETWEEN 1 AND 65535
       AND coalesce(bool_and(e.entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                                          'callback', 'callback_target', 'limit', 'breaker', 'balance', 'session')
                             AND e.actor IS NOT NULL AND e.entity_id IS NOT NULL
                             AND e.action IS NOT NULL AND e.detail IS NOT NULL), false)
      FROM unnest(p_events) AS e;
$$;
