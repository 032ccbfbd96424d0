-- prune_balance_snapshots: the verified balance snapshots older than the
-- network's balance_settings.snapshot_keep_days deleted, oldest first (by
-- balance_snapshots_recorded_idx), up to p_max a call, and the reads left
-- without a snapshot with them. Kept whatever their age: a snapshot not
-- verified yet, an account's baseline, one a drift alert names (its baseline,
-- first or latest), and every snapshot with no newer successful one of its
-- account (so balance_status still shows each account's latest read and
-- balance). snapshot_keep_days 0 deletes
-- nothing. The verify_drift_worker calls it after each round, as p_worker.
-- Audited (entity 'balance', action 'snapshots_pruned') with how many and
-- the range of ids and recording times, when something was deleted.
-- Returns how many snapshots were deleted. QT002 no worker name or p_max
-- outside 1..10000.
-- Locks: the snapshots deleted (SKIP LOCKED: verify_drift holds the ones it
-- is verifying), then the reads deleted.
CREATE OR REPLACE FUNCTION prune_balance_snapshots(p_worker text, p_max integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock();
    v_days  integer;
    v_gone  record;
BEGIN
    PERFORM check_read_committed('prune_balance_snapshots');
    PERFORM check_worker('prune_balance_snapshots', p_worker);
    PERFORM check_args('prune_balance_snapshots', p_max => p_max, p_max_limit => 10000);
    SELECT s.snapshot_keep_days INTO STRICT v_days FROM balance_settings s;
    IF v_days = 0 THEN
        RETURN 0;
    END IF;

    WITH old AS (
        SELECT s.id
          FROM balance_snapshots s
         WHERE s.recorded_at < v_now - make_interval(days => v_days)
           AND s.verified_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM balance_baselines b WHERE b.snapshot_id = s.id)
           AND NOT EXISTS (SELECT 1 FROM balance_drift_alerts a
                            WHERE s.id IN (a.baseline_snapshot_id, a.first_snapshot_id, a.last_snapshot_id))
           AND EXISTS (SELECT 1 FROM balance_snapshots newer
                        WHERE newer.account_kind = s.account_kind AND newer.account_key = s.account_key
                          AND newer.address = s.address AND newer.asset = s.asset
                          AND newer.id > s.id AND newer.balance IS NOT NULL)
         ORDER BY s.recorded_at, s.id
         LIMIT p_max
           FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM balance_snapshots s USING old WHERE s.id = old.id
        RETURNING s.id, s.read_id, s.recorded_at
    ), reads AS (
        DELETE FROM balance_reads r
         WHERE r.id IN (SELECT DISTINCT deleted.read_id FROM deleted)
           AND NOT EXISTS (SELECT 1 FROM balance_snapshots s
                            WHERE s.read_id = r.id AND s.id NOT IN (SELECT deleted.id FROM deleted))
        RETURNING r.id
    )
    SELECT count(*) AS n, min(deleted.id) AS first_id, max(deleted.id) AS last_id,
           min(deleted.recorded_at) AS first_at, max(deleted.recorded_at) AS last_at,
           (SELECT count(*) FROM reads) AS reads
      INTO v_gone
      FROM deleted;

    IF v_gone.n > 0 THEN
        PERFORM write_audit(ARRAY[(p_worker, 'balance', 'snapshots', NULL, 'snapshots_pruned', NULL, NULL,
                                   jsonb_build_object('snapshots', v_gone.n, 'reads', v_gone.reads,
                                                      'first_id', v_gone.first_id, 'last_id', v_gone.last_id,
                                                      'first_recorded_at', v_gone.first_at,
                                                      'last_recorded_at', v_gone.last_at,
                                                      'keep_days', v_days))::qtg.audit_event]);
    END IF;
    RETURN v_gone.n;
END
$$;
