SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
DROP TABLE audit_outbox, callback_outbox, worker_heartbeats, node_intents, movement_plan_edges,
           movement_request_nodes, movement_requests, movement_templates, lane_baselines,
           executor_health, executors CASCADE;
$ddl$);

DROP TYPE qtg.observe_phase, qtg.node_state, qtg.request_state;
