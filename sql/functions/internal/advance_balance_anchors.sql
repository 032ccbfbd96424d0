-- advance_balance_anchors: moves the balance anchors (balance_anchors,
-- 0042_balance_anchors) so that verify_drift reads the effects decided since
-- the anchor, not every one since the baseline. Per account with a baseline:
--   a new anchor      an account whose anchor has another baseline, or none,
--                     starts at its baseline's read, with nothing summed;
--   the fence ready   once none of the transactions that ran when its fence was
--                     drawn (fence_xacts) still runs, every decision stamped
--                     before fence_at is committed or gone for good (a stamp is
--                     the clock of the statement that made it: one before
--                     fence_at was made by a transaction begun by then); a
--                     statement of its own then adds the effects decided in
--                     [through_at, fence_at) to the sums (each counted against
--                     the baseline's read, and as certain or void from then on)
--                     and moves through_at there;
--   a new fence       where there is none: p_lag_seconds before p_now (reads
--                     that started before an anchor's through_at are counted
--                     from the baseline, the slow way: the lag leaves a read
--                     that long to be recorded, and it covers a clock stepped
--                     back by less), and the transactions running now in this
--                     database (running_transactions).
-- Needs READ COMMITTED (each statement sees what was committed before it); in
-- another mode it moves nothing. Internal (verify_drift). Locks: the anchors.
CREATE OR REPLACE FUNCTION advance_balance_anchors(p_now timestamptz, p_lag_seconds numeric) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_fence_at timestamptz := p_now - make_interval(secs => p_lag_seconds::double precision);
    v_running  text[];
    v_ready    balance_anchors[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN;
    END IF;
    PERFORM 1 FROM balance_anchors a ORDER BY a.account_kind, a.account_key, a.address, a.asset FOR UPDATE;

    INSERT INTO balance_anchors AS a (account_kind, account_key, address, asset, baseline_snapshot_id, through_at,
                                      low, high, moved_at)
    SELECT bl.account_kind, bl.account_key, bl.address, bl.asset, bl.snapshot_id, b0.read_started_at, 0, 0, p_now
      FROM balance_baselines bl
      JOIN balance_snapshots b0 ON b0.id = bl.snapshot_id
     ORDER BY 1, 2, 3, 4
    ON CONFLICT (account_kind, account_key, address, asset) DO UPDATE
       SET baseline_snapshot_id = excluded.baseline_snapshot_id, through_at = excluded.through_at,
           low = 0, high = 0, lanes = '{}', executors = '{}', fence_at = NULL, fence_xacts = '{}',
           moved_at = excluded.moved_at
     WHERE a.baseline_snapshot_id <> excluded.baseline_snapshot_id;

    v_running := running_transactions();
    SELECT coalesce(array_agg(a), '{}')
      INTO v_ready
      FROM balance_anchors a
     WHERE a.fence_at IS NOT NULL
       AND NOT a.fence_xacts && v_running;

    -- a statement of its own: its snapshot is taken after the fence's transactions ended
    IF cardinality(v_ready) > 0 THEN
        WITH ready AS (
            SELECT a.account_kind, a.account_key, a.address, a.asset, a.through_at, a.fence_at,
                   b0.read_started_at AS s0, b0.recorded_at AS e0
              FROM unnest(v_ready) a  -- locked: as they are now
              JOIN balance_snapshots b0 ON b0.id = a.baseline_snapshot_id
        ), effects AS (
            SELECT * FROM node_balance_effects(ARRAY(SELECT balance_candidates(min(ready.through_at)) FROM ready))
        ), decided AS (
            SELECT r.account_kind, r.account_key, r.address, r.asset, x.lane, x.executor_key,
                   balance_change(balance_state(x.certain_at, x.void_at, x.may_start_at, r.s0, r.e0),
                                  balance_state(x.certain_at, x.void_at, x.may_start_at, r.fence_at, r.fence_at),
                                  x.low, x.high, x.reversible) AS change
              FROM ready r
              JOIN effects x ON x.account_kind = r.account_kind AND x.account_key = r.account_key
                            AND x.address = r.address AND x.asset = r.asset
             WHERE balance_decided(x.certain_at, x.void_at, r.fence_at)
               AND NOT balance_decided(x.certain_at, x.void_at, r.through_at)
        ), sums AS (
            SELECT d.account_kind, d.account_key, d.address, d.asset, sum(d.change[1]) AS lo, sum(d.change[2]) AS hi,
                   array_agg(DISTINCT d.lane) AS lanes, array_agg(DISTINCT d.executor_key) AS executors
              FROM decided d
             GROUP BY d.account_kind, d.account_key, d.address, d.asset
        )
        UPDATE balance_anchors a
           SET low        = a.low + coalesce(s.lo, 0),
               high       = a.high + coalesce(s.hi, 0),
               lanes      = ARRAY(SELECT DISTINCT l FROM unnest(a.lanes || coalesce(s.lanes, '{}')) l ORDER BY l),
               executors  = ARRAY(SELECT DISTINCT x FROM unnest(a.executors || coalesce(s.executors, '{}')) x ORDER BY x),
               through_at = a.fence_at,
               fence_at   = NULL,
               fence_xacts = '{}',
               moved_at   = p_now
          FROM ready r
          LEFT JOIN sums s ON s.account_kind = r.account_kind AND s.account_key = r.account_key
                          AND s.address = r.address AND s.asset = r.asset
         WHERE a.account_kind = r.account_kind AND a.account_key = r.account_key
           AND a.address = r.address AND a.asset = r.asset;
    END IF;

    IF EXISTS (SELECT 1 FROM balance_anchors a WHERE a.fence_at IS NULL AND a.through_at < v_fence_at) THEN
        -- this transaction's own decisions are visible to it
        v_running := running_transactions();
        UPDATE balance_anchors a
           SET fence_at = v_fence_at,
               fence_xacts = v_running
         WHERE a.fence_at IS NULL AND a.through_at < v_fence_at;
    END IF;
END
$$;
