SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX node_intents_deposit_tx_key;
$ddl$);
