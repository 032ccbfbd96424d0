-- callback_settings.keep_days dropped (the callbacks deleted stay deleted).
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX callback_outbox_done_idx;
ALTER TABLE callback_settings DROP COLUMN keep_days;
$ddl$);
