SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE engine_limits DROP COLUMN max_observe_held_seconds;
$ddl$);
