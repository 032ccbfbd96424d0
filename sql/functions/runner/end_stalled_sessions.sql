-- end_stalled_sessions: ends the sessions of this network's logins (members of
-- its runner, operator and reader roles, in this database; never an
-- administrative login's: a superuser, a role that may create roles or
-- databases, replicate or bypass row security, or a member of the owner role,
-- whose migrations may run long; never the caller's own) that hold engine rows past the engine's bounds, whatever
-- timeouts those sessions set for themselves:
--   idle in a transaction for more than p_idle_seconds (default 60: an
--   observer's chunk waits at most 30 s on its slowest provider call between
--   two statements), or in one statement for more than p_statement_seconds
--   (default 120: the runner roles' statement_timeout is 60 s), or in one
--   transaction for more than p_transaction_seconds (default 600: no worker's
--   transaction lasts a minute; one kept open with a statement now and then
--   holds its snapshot, and the server's cleanup, as long as it likes) -> the
--   session is terminated (its transaction rolls back, its locks go; a claim
--   it held is recovered as any dead claimer's is).
-- The bounds are at least 30, 60 and 120 s whatever the caller asks, and at
-- most a day (QT002 otherwise): a caller may end stalled sessions sooner than
-- an idle timeout would, never a working one. Time is clock()'s (a pinned clock in a test
-- database ages the sessions). Each ended session is in the audit outbox
-- (entity 'session', actor: the caller's worker name). QT014 when the engine
-- cannot see or signal other sessions (its owner lacks pg_read_all_stats and
-- pg_signal_backend: migration 0047 says how).
-- Returns one row per ended session. Locks nothing of the engine's.
CREATE OR REPLACE FUNCTION end_stalled_sessions(
    p_worker            text,
    p_idle_seconds        numeric DEFAULT 60,
    p_statement_seconds   numeric DEFAULT 120,
    p_transaction_seconds numeric DEFAULT 600
) RETURNS TABLE (pid integer, login text, state text, held_seconds numeric, ended boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := clock();
    v_roles    text[];
    v_tx_since timestamptz;
BEGIN
    PERFORM check_read_committed('end_stalled_sessions');
    PERFORM check_worker('end_stalled_sessions', p_worker);
    -- (NaN and Infinity compare above every number: refused by the upper bound)
    IF p_idle_seconds IS NULL OR p_idle_seconds < 30 OR p_idle_seconds > 86400 OR p_statement_seconds IS NULL
       OR p_statement_seconds < 60 OR p_statement_seconds > 86400 OR p_transaction_seconds IS NULL
       OR p_transaction_seconds < 120 OR p_transaction_seconds > 86400 THEN
        RAISE EXCEPTION 'end_stalled_sessions: the bounds are 30 s to a day idle, 60 s to a day in a statement and '
                        '120 s to a day in a transaction, got %, % and %',
                        coalesce(p_idle_seconds::text, 'NULL'), coalesce(p_statement_seconds::text, 'NULL'),
                        coalesce(p_transaction_seconds::text, 'NULL')
            USING ERRCODE = 'QT002', HINT = 'Call it with the defaults, or longer bounds.';
    END IF;
    IF NOT (pg_has_role('pg_read_all_stats', 'USAGE') AND pg_has_role('pg_signal_backend', 'USAGE')) THEN
        RAISE EXCEPTION 'end_stalled_sessions: the engine''s owner cannot see or end other sessions'
            USING ERRCODE = 'QT014',
                  HINT = 'As a superuser: GRANT pg_read_all_stats, pg_signal_backend TO qtg_owner.';
    END IF;
    v_tx_since := v_now - make_interval(secs => p_transaction_seconds::double precision);
    SELECT array_agg(r.rolname::text) INTO v_roles
      FROM qtg_admin.networks n
     CROSS JOIN LATERAL (VALUES (n.runner_role), (n.operator_role), (format('qtg_%s_reader', n.network_name))) g(name)
      JOIN pg_roles r ON r.rolname = g.name
     WHERE n.network_name = current_schema();

    RETURN QUERY
    WITH stalled AS (
        SELECT a.pid, a.usename::text AS login, a.state,
               extract(epoch FROM v_now - CASE WHEN a.xact_start < v_tx_since THEN a.xact_start
                                               WHEN a.state = 'active' THEN a.query_start
                                               ELSE a.state_change END) AS held,
               CASE WHEN a.xact_start < v_tx_since THEN 'transaction'
                    WHEN a.state = 'active' THEN 'statement' ELSE 'idle' END AS why
          FROM pg_stat_activity a
          JOIN pg_roles u ON u.oid = a.usesysid
         WHERE a.pid <> pg_backend_pid()
           AND a.datname = current_database()
           AND a.backend_type = 'client backend'
           AND NOT (u.rolsuper OR u.rolcreaterole OR u.rolcreatedb OR u.rolreplication OR u.rolbypassrls
                    OR pg_has_role(u.oid, 'qtg_owner', 'MEMBER'))
           AND a.xact_start IS NOT NULL
           AND EXISTS (SELECT 1 FROM unnest(v_roles) g(name) WHERE pg_has_role(u.oid, g.name, 'MEMBER'))
           AND ((a.state IN ('idle in transaction', 'idle in transaction (aborted)')
                 AND a.state_change < v_now - make_interval(secs => p_idle_seconds::double precision))
                OR (a.state = 'active'
                    AND a.query_start < v_now - make_interval(secs => p_statement_seconds::double precision))
                OR a.xact_start < v_tx_since)
    ), ended AS (
        SELECT s.*, pg_terminate_backend(s.pid) AS ended FROM stalled s
    ), audited AS (
        SELECT write_audit(array_agg((p_worker, 'session', e.pid::text, NULL::bigint, 'session_ended',
                                      e.state, 'ended',
                                      jsonb_build_object('login', e.login, 'held_seconds', round(e.held, 1),
                                                         'past', e.why))
                                     ::qtg.audit_event ORDER BY e.pid)) AS written
          FROM ended e
         WHERE e.ended
        HAVING count(*) > 0
    )
    SELECT e.pid, e.login, e.state, round(e.held, 1), e.ended
      FROM ended e
      LEFT JOIN audited ON true
     ORDER BY e.pid;
END
$$;
