-- drift_alerts: every drift alert, newest first: the account, OPEN or
-- ACKNOWLEDGED, the expected range and the actual balance of the latest
-- snapshot that showed it, the unexplained change (actual less the nearest end
-- of the range), the baseline and snapshots, the breakers it tripped, who asked
-- to acknowledge it (and the balance they accepted: ack_actual) and who did.
-- A request whose balance the alert no longer shows is void
-- (acknowledge_drift_alert asks anew): its columns read NULL.
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
       CASE WHEN ack.stands THEN d.ack_requested_by END AS ack_requested_by,
       CASE WHEN ack.stands THEN d.ack_requested_at END AS ack_requested_at,
       CASE WHEN ack.stands THEN d.ack_actual END AS ack_actual,
       d.acknowledged_by,
       d.acknowledged_at,
       CASE WHEN ack.stands THEN d.ack_reason END AS ack_reason
  FROM balance_drift_alerts d
 CROSS JOIN LATERAL (SELECT d.alert_state = 'ACKNOWLEDGED' OR d.ack_actual = d.actual AS stands) ack
 ORDER BY d.id DESC;
