-- lane_latency: how long each lane's nodes took over the last day, from the
-- side effect to the node's completion (submitted_at -> finished_at of the
-- COMPLETED nodes that finished in the last 24 hours of the clock): count,
-- p50 / p95 / p99 and the slowest, in seconds, beside the lane's baseline
-- (lane_baselines, or the default lane's). For dashboards and `qtg status`;
-- reads the nodes table (no index on finished_at: a dashboard's query, not a
-- worker's).
CREATE OR REPLACE VIEW lane_latency AS
SELECT node.lane,
       count(*) AS completed,
       round(percentile_cont(0.50) WITHIN GROUP (ORDER BY s.seconds)::numeric, 3) AS p50_seconds,
       round(percentile_cont(0.95) WITHIN GROUP (ORDER BY s.seconds)::numeric, 3) AS p95_seconds,
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY s.seconds)::numeric, 3) AS p99_seconds,
       round(max(s.seconds)::numeric, 3) AS max_seconds,
       (lane_of(node.lane)).baseline_seconds
  FROM movement_request_nodes node
 CROSS JOIN LATERAL (SELECT extract(epoch FROM node.finished_at - node.submitted_at) AS seconds) s
 WHERE node.node_state = 'COMPLETED'
   AND node.submitted_at IS NOT NULL
   AND node.finished_at >= clock() - interval '1 day'
 GROUP BY node.lane;
