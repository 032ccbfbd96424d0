SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP TABLE lane_pacing_learned;
DROP TABLE lane_latency_samples;
$ddl$);
