SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP TABLE audit_chain_head;
DROP TABLE audit_log;
$ddl$);

DROP FUNCTION qtg_admin.refuse_audit_log_change();
