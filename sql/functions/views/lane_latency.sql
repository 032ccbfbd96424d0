-- lane_latency: how long each lane's nodes took over the last day, from the
-- side effect to the node's completion (submitted_at -> finished_at of the
-- COMPLETED nodes that finished in the last 24 hours of the clock): count,
-- p50 / p95 / p99 and the slowest, in seconds, beside the lane's baseline
-- (lane_baselines, or the default lane's, as lane_of decides; repeated here
-- because a view's readers may not execute internal functions). For
-- dashboards, /metrics and `qtg status`; reads only the last day's
-- completions (movement_request_nodes_completed_idx), however many nodes
-- have finished before.
CREATE OR REPLACE VIEW lane_latency AS
WITH finished AS (
    SELECT node.lane,
           count(*) AS completed,
           percentile_cont(ARRAY[0.50, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.seconds) AS p,
           max(s.seconds) AS slowest
      FROM movement_request_nodes node
     CROSS JOIN LATERAL (SELECT extract(epoch FROM node.finished_at - node.submitted_at) AS seconds) s
     WHERE node.node_state = 'COMPLETED'
       AND node.submitted_at IS NOT NULL
       AND node.finished_at >= clock() - interval '1 day'
     GROUP BY node.lane
)
SELECT f.lane,
       f.completed,
       round(f.p[1]::numeric, 3) AS p50_seconds,
       round(f.p[2]::numeric, 3) AS p95_seconds,
       round(f.p[3]::numeric, 3) AS p99_seconds,
       round(f.slowest::numeric, 3) AS max_seconds,
       coalesce(own.baseline_seconds, fallback.baseline_seconds) AS baseline_seconds
  FROM finished f
  LEFT JOIN lane_baselines own ON own.lane = f.lane
  LEFT JOIN lane_baselines fallback ON fallback.lane = 'default';
