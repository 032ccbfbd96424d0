-- running_transactions: the virtual transaction ids of the transactions that
-- may still write this database's rows, the caller's own left out (each
-- backend holds an exclusive lock on its own id while its transaction runs,
-- pg_locks). The fences of roll_up_pipeline_counts and advance_balance_anchors
-- wait for these. Two kinds of backend write no row here, and are left out:
-- one in another database of the cluster (a busy neighbour would hold the
-- fences for as long as it kept a transaction open), and one with no login
-- (an autovacuum worker, whose VACUUM of a large table may run for hours).
-- pg_stat_activity tells both to every role (datid; usesysid is null for a
-- process with no login). It is read afresh (its rows are otherwise those of
-- the transaction's first read) and after pg_locks: a backend that ended in
-- between (no row: an autovacuum worker done with a small table) has ended
-- its transaction too, and is left out; one whose pid another backend took
-- meanwhile is kept, which only holds a fence one more round. Prepared
-- transactions are not looked at: the engine makes none. Internal.
CREATE OR REPLACE FUNCTION running_transactions() RETURNS text[]
LANGUAGE sql
AS $$
    SELECT pg_stat_clear_snapshot();
    SELECT coalesce(array_agg(l.virtualxid ORDER BY l.virtualxid), '{}')
      FROM pg_locks l
     WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock'
       AND l.pid IS DISTINCT FROM pg_backend_pid()
       AND EXISTS (SELECT 1 FROM pg_stat_activity a
                    WHERE a.pid = l.pid
                      AND a.usesysid IS NOT NULL
                      AND a.datid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()));
$$;
