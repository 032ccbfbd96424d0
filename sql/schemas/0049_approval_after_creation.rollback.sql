SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_requests DROP CONSTRAINT movement_requests_approved_after_created;
$ddl$);
