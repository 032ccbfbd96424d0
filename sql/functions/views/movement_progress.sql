-- movement_progress: one row per movement with its nodes counted by state.
CREATE OR REPLACE VIEW movement_progress AS
SELECT request.id AS movement_id,
       request.external_id,
       request.request_state,
       request.stop_reason,
       request.amount,
       request.asset,
       request.template_name,
       count(node.id) AS nodes_total,
       count(node.id) FILTER (WHERE node.node_state = 'COMPLETED') AS nodes_completed,
       count(node.id) FILTER (WHERE node.node_state = 'FAILED') AS nodes_failed,
       count(node.id) FILTER (WHERE node.node_state = 'SKIPPED') AS nodes_skipped,
       count(node.id) FILTER (WHERE node.node_state IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING', 'UNKNOWN')) AS nodes_in_flight,
       count(node.id) FILTER (WHERE node.node_state IN ('PENDING', 'READY')) AS nodes_waiting,
       round(100.0 * count(node.id) FILTER (WHERE node.node_state IN ('COMPLETED', 'FAILED', 'SKIPPED'))
             / greatest(count(node.id), 1), 1) AS percent_settled,
       request.created_by,
       request.approved_by,
       request.created_at,
       request.started_at,
       request.finished_at,
       request.expires_at,
       coalesce(request.finished_at, clock()) - request.created_at AS age
  FROM movement_requests request
  LEFT JOIN movement_request_nodes node ON node.request_id = request.id
 GROUP BY request.id;
