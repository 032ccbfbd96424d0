-- running_transactions: the virtual transaction ids of the transactions that
-- run now in this database, the caller's own left out (each backend holds an
-- exclusive lock on its own id while its transaction runs, pg_locks). The
-- fences of roll_up_pipeline_counts and advance_balance_anchors wait for
-- these. A transaction in another database of the cluster cannot write this
-- one's rows, so it is left out: a busy neighbour would hold the fences for
-- as long as it kept a transaction open. A backend is placed in its database
-- through pg_stat_activity, read afresh (its view is otherwise the one of the
-- transaction's first read) and after pg_locks: a backend that ended in
-- between, its pid taken by another, has ended its transaction too. A backend
-- with no database (a background process) is kept. Prepared transactions are
-- not looked at: the engine makes none. Internal.
CREATE OR REPLACE FUNCTION running_transactions() RETURNS text[]
LANGUAGE sql
AS $$
    SELECT pg_stat_clear_snapshot();
    SELECT coalesce(array_agg(l.virtualxid ORDER BY l.virtualxid), '{}')
      FROM pg_locks l
     WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock'
       AND l.pid IS DISTINCT FROM pg_backend_pid()
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                        WHERE a.pid = l.pid
                          AND a.datid <> (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()));
$$;
