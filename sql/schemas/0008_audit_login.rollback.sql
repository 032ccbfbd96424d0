SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE audit_outbox DROP COLUMN login;
$ddl$);
