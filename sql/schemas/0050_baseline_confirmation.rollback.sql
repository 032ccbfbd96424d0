SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE balance_baselines DROP COLUMN confirmed_at, DROP COLUMN confirmed_by;
$ddl$);
