SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes
    DROP COLUMN observe_held_reason,
    DROP COLUMN observe_held_seconds;
$ddl$);
