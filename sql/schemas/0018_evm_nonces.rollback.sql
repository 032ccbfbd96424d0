SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP TABLE evm_transactions;
ALTER TABLE node_intents
    DROP CONSTRAINT node_intents_account_fkey,
    DROP CONSTRAINT node_intents_account_check,
    DROP COLUMN sender,
    DROP COLUMN chain_key;
DROP TABLE evm_nonces;
ALTER TABLE chains
    DROP CONSTRAINT chains_fee_caps_check,
    DROP COLUMN max_priority_fee_per_gas,
    DROP COLUMN max_fee_per_gas;
$ddl$);
