-- depends: 0035_audit_log_login
--
-- balance_settings.snapshot_keep_days: how long a verified balance snapshot is
-- kept (400 days by default, a year's audit and a margin; 0 keeps them all).
-- The balance_snapshot sidecar records one row per account a minute, which
-- no one pruned: the table and balance_status, which reads every account's
-- latest row, grew with every read. prune_balance_snapshots (the
-- verify_drift_worker's, after each round) deletes the older ones, never an
-- unverified snapshot, a baseline, one a drift alert names, nor the newest of
-- an account; the reads left without a snapshot go with them. It finds the
-- old ones by balance_snapshots_recorded_idx, so a call reads only what is past
-- the keep, not the whole table.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE balance_settings
    ADD COLUMN snapshot_keep_days integer NOT NULL DEFAULT 400
        CHECK (snapshot_keep_days BETWEEN 0 AND 36500);
COMMENT ON COLUMN balance_settings.snapshot_keep_days IS
    'days a verified balance snapshot is kept before prune_balance_snapshots deletes it (baselines, alerts'' snapshots and each account''s newest are kept); 0 keeps every snapshot';
CREATE INDEX balance_snapshots_recorded_idx ON balance_snapshots (recorded_at);
$ddl$);
