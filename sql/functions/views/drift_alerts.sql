-- drift_alerts: every drift alert, newest first: the account, OPEN or
-- ACKNOWLEDGED, the expected range and the actual balance of the latest
-- snapshot that showed it, the unexplained change (actual less the nearest end
-- of the range), the baseline and snapshots, the breakers it tripped, who asked
-- to acknowledge it (and the balance they accepted: ack_actual) and who did.
CREATE OR REPLACE VIEW drift_alerts AS
SELECT d.id AS alert_id,
       d.alert_state,
       d.account_kind,
       d.account_key,
       d.address,
       d.asset,
       d.expected_low,
       d.expected_high,
       d.actual,
       CASE WHEN d.actual < d.expected_low THEN d.actual - d.expected_low
            WHEN d.actual > d.expected_high THEN d.actual - d.expected_high
            ELSE 0 END AS unexplained,
       d.baseline_snapshot_id,
       d.first_snapshot_id,
       d.last_snapshot_id,
       d.raised_at,
       d.last_seen_at,
       d.raised_by,
       d.breakers,
       d.ack_requested_by,
       d.ack_requested_at,
       d.ack_actual,
       d.acknowledged_by,
       d.acknowledged_at,
       d.ack_reason
  FROM balance_drift_alerts d
 ORDER BY d.id DESC;
