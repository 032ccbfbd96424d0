SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP TABLE evm_transactions;
ALTER TABLE node_intents
    DROP CONSTRAINT node_intents_account_fkey,
    DROP CONSTRAINT node_intents_account_check,
    DROP COLUMN sender,
    DROP COLUMN chain_key;
DROP TABLE evm_nonces;
$ddl$);
