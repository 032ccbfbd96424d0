SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE lane_baselines
    DROP COLUMN observe_error_retry_seconds,
    DROP COLUMN recovery_retry_seconds,
    DROP COLUMN release_retry_seconds;
$ddl$);

DROP TYPE qtg.audit_event;
