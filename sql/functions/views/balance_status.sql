-- balance_status: one row per account that has been read: the latest
-- successful snapshot (balance, block, when it was read), the range the
-- engine's records expect it in (balance_expectations against its baseline),
-- the baseline, the latest read if it failed (and why), and its open drift
-- alert. The expected range is computed when the view is read.
CREATE OR REPLACE VIEW balance_status AS
WITH accounts AS (
    SELECT DISTINCT ON (s.account_kind, s.account_key, s.address, s.asset)
           s.account_kind, s.account_key, s.address, s.asset, s.id AS latest_id, s.error AS latest_error
      FROM balance_snapshots s
     ORDER BY s.account_kind, s.account_key, s.address, s.asset, s.id DESC
), good AS (
    SELECT a.*, g.id AS snapshot_id, g.balance, g.block_number, g.read_started_at, g.recorded_at
      FROM accounts a
      LEFT JOIN LATERAL (
          SELECT s.id, s.balance, s.block_number, s.read_started_at, s.recorded_at
            FROM balance_snapshots s
           WHERE s.account_kind = a.account_kind AND s.account_key = a.account_key
             AND s.address = a.address AND s.asset = a.asset AND s.balance IS NOT NULL
           ORDER BY s.id DESC LIMIT 1) g ON true
), expected AS (
    SELECT * FROM balance_expectations(ARRAY(SELECT good.snapshot_id FROM good WHERE good.snapshot_id IS NOT NULL))
)
SELECT good.account_kind,
       good.account_key,
       good.address,
       good.asset,
       good.balance,
       good.block_number,
       good.read_started_at,
       good.recorded_at,
       e.expected_low,
       e.expected_high,
       e.baseline,
       e.baseline_snapshot_id,
       good.snapshot_id,
       CASE WHEN good.latest_error IS NOT NULL THEN good.latest_error END AS latest_read_error,
       d.id AS open_alert_id
  FROM good
  LEFT JOIN expected e ON e.snapshot_id = good.snapshot_id
  LEFT JOIN balance_drift_alerts d ON d.alert_state = 'OPEN' AND d.account_kind = good.account_kind
                                  AND d.account_key = good.account_key AND d.address = good.address
                                  AND d.asset = good.asset
 ORDER BY good.account_kind, good.account_key, good.address, good.asset;
