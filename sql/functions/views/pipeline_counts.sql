-- pipeline_counts: how many movements and nodes are in each state.
CREATE OR REPLACE VIEW pipeline_counts AS
SELECT 'movement'::text AS entity, request_state::text AS state, count(*) AS total
  FROM movement_requests
 GROUP BY request_state
UNION ALL
SELECT 'node', node_state::text, count(*)
  FROM movement_request_nodes
 GROUP BY node_state;
