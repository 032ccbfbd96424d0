SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE evm_nonces DROP COLUMN skipped_nonces, DROP COLUMN skipped_since;
$ddl$);
