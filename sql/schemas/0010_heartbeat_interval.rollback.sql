SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP VIEW IF EXISTS stalled_workers, worker_status;
ALTER TABLE worker_heartbeats DROP CONSTRAINT worker_heartbeats_expected_interval_seconds_check;
ALTER TABLE worker_heartbeats
    ALTER COLUMN expected_interval_seconds TYPE numeric
    USING extract(epoch FROM expected_interval_seconds);
ALTER TABLE worker_heartbeats ADD CONSTRAINT worker_heartbeats_expected_interval_seconds_check
    CHECK (expected_interval_seconds > 0);
$ddl$);
