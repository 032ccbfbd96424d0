SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes DROP COLUMN claim_hash;
$ddl$);
