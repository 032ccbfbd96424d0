SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE node_intents DROP COLUMN value_counted;
$ddl$);
