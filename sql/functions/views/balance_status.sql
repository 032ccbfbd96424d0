-- balance_status: one row per account that has been read: the latest
-- successful snapshot (balance, block, when it was read), the range the
-- engine's records expected it in and the outcome when verify_drift verified
-- it (NULL until then), the baseline, the latest read if it failed (and why),
-- its open drift alert, and who confirmed the baseline (NULL: one runner's
-- reading, unconfirmed: confirm_balance_baseline). The range is verify_drift's, stored on the
-- snapshot: reading the view computes nothing over the nodes, and it reads a
-- few index entries per account, however many snapshots are kept.
CREATE OR REPLACE VIEW balance_status AS
WITH RECURSIVE keys AS (
    -- the accounts read, found by skipping through balance_snapshots_account_idx
    -- one account at a time (a read per account, not one per snapshot)
    (SELECT s.account_kind, s.account_key, s.address, s.asset
       FROM balance_snapshots s
      ORDER BY s.account_kind, s.account_key, s.address, s.asset
      LIMIT 1)
    UNION ALL
    SELECT n.account_kind, n.account_key, n.address, n.asset
      FROM keys k
     CROSS JOIN LATERAL (
         SELECT s.account_kind, s.account_key, s.address, s.asset
           FROM balance_snapshots s
          WHERE (s.account_kind, s.account_key, s.address, s.asset)
                > (k.account_kind, k.account_key, k.address, k.asset)
          ORDER BY s.account_kind, s.account_key, s.address, s.asset
          LIMIT 1) n
), accounts AS (
    SELECT k.account_kind, k.account_key, k.address, k.asset, l.id AS latest_id, l.error AS latest_error
      FROM keys k
     CROSS JOIN LATERAL (
         SELECT s.id, s.error
           FROM balance_snapshots s
          WHERE s.account_kind = k.account_kind AND s.account_key = k.account_key
            AND s.address = k.address AND s.asset = k.asset
          ORDER BY s.id DESC LIMIT 1) l
), good AS (
    SELECT a.*, g.id AS snapshot_id, g.balance, g.block_number, g.read_started_at, g.recorded_at,
           g.expected_low, g.expected_high, g.verified_at, g.outcome
      FROM accounts a
      LEFT JOIN LATERAL (
          SELECT s.id, s.balance, s.block_number, s.read_started_at, s.recorded_at,
                 s.expected_low, s.expected_high, s.verified_at, s.outcome
            FROM balance_snapshots s
           WHERE s.account_kind = a.account_kind AND s.account_key = a.account_key
             AND s.address = a.address AND s.asset = a.asset AND s.balance IS NOT NULL
           ORDER BY s.id DESC LIMIT 1) g ON true
)
SELECT good.account_kind,
       good.account_key,
       good.address,
       good.asset,
       good.balance,
       good.block_number,
       good.read_started_at,
       good.recorded_at,
       good.expected_low,
       good.expected_high,
       b0.balance AS baseline,
       bl.snapshot_id AS baseline_snapshot_id,
       good.snapshot_id,
       good.latest_error AS latest_read_error,
       d.id AS open_alert_id,
       good.verified_at,
       good.outcome,
       bl.confirmed_by AS baseline_confirmed_by
  FROM good
  LEFT JOIN balance_baselines bl ON bl.account_kind = good.account_kind AND bl.account_key = good.account_key
                                AND bl.address = good.address AND bl.asset = good.asset
  LEFT JOIN balance_snapshots b0 ON b0.id = bl.snapshot_id
  LEFT JOIN balance_drift_alerts d ON d.alert_state = 'OPEN' AND d.account_kind = good.account_kind
                                  AND d.account_key = good.account_key AND d.address = good.address
                                  AND d.asset = good.asset
 ORDER BY good.account_kind, good.account_key, good.address, good.asset;
