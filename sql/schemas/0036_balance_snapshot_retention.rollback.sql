-- balance_settings.snapshot_keep_days dropped (the snapshots deleted stay deleted).
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX balance_snapshots_recorded_idx;
ALTER TABLE balance_settings DROP COLUMN snapshot_keep_days;
$ddl$);
