SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE engine_limits
    DROP COLUMN max_heartbeat_instances,
    DROP COLUMN max_heartbeat_workers;
$ddl$);
