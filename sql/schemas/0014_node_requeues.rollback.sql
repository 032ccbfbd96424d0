SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP VIEW IF EXISTS requeue_requests;
DROP TABLE node_requeues;
$ddl$);
