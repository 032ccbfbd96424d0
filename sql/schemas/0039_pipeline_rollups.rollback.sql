-- pipeline_rollups and pipeline_rollup_totals dropped (the function layer of
-- a build before 0039 counts every row in pipeline_counts), and the triggers
-- that keep finished rows final.
SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP TABLE pipeline_rollup_totals;
DROP TABLE pipeline_rollups;
DROP TRIGGER movement_request_nodes_final ON movement_request_nodes;
DROP TRIGGER movement_requests_final ON movement_requests;
$ddl$);
DROP FUNCTION qtg_admin.refuse_reopening();
