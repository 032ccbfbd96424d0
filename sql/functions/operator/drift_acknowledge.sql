-- drift_acknowledge: acknowledge_drift_alert as a procedure, for CALL in
-- psql: one operator's half of accepting a drifted balance, with a reason;
-- the first call asks (ACK_REQUESTED), a second operator's acknowledges it
-- and re-baselines the account (ACKNOWLEDGED).
--   CALL drift_acknowledge(7, 'the key was rotated; the loss is written off');
-- Answers the alert's state in the INOUT parameter alert_state. The rules,
-- the refusals and the writes are acknowledge_drift_alert's.
CREATE OR REPLACE PROCEDURE drift_acknowledge(
    p_alert_id bigint,
    p_reason   text,
    INOUT alert_state text DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT acknowledge_drift_alert(p_alert_id, p_reason);
$$;
