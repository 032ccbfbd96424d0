SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP INDEX evm_transactions_fills;
DROP TABLE evm_nonce_marks;
$ddl$);
