SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE balance_drift_alerts DROP COLUMN ack_actual;
$ddl$);
