SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE rehearsal_requests DROP COLUMN claims;
$ddl$);
