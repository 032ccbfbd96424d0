SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE callback_outbox DROP COLUMN replayed_at;
$ddl$);
