-- depends: 0072_callback_replayed_at
--
-- Accepting a drifted balance takes two operators (acknowledge_drift_alert),
-- but the second acknowledged whatever the account's latest reading was when
-- it committed: a further loss read after the first operator asked was
-- written off by two people who had seen another balance. The request now
-- records the balance it accepts:
--   balance_drift_alerts.ack_actual  the alert's actual balance when the
--                                    acknowledgement was asked for; NULL
--                                    before any request
-- and a request whose balance the alert no longer shows is no request.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE balance_drift_alerts ADD COLUMN ack_actual numeric;
$ddl$);
