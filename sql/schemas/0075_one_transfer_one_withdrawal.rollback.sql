SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP TABLE withdrawal_transfers;
$ddl$);
