-- executor_status: every registered executor with its latest health report
-- (executor_health: HEALTHY, DEGRADED or DOWN, why, who checked and when;
-- 'never checked' when no report is there, 'stale' when the latest is over
-- five minutes old) and its READY nodes. A fresh DOWN holds those nodes
-- READY (claim_ready_nodes skips them, their attempts untouched). The READY
-- nodes counted are the claimable ones (a quarantined node is in
-- quarantined_nodes), read through the READY index, not every node of the
-- executor's.
CREATE OR REPLACE VIEW executor_status AS
SELECT e.executor_key,
       CASE WHEN h.executor_key IS NULL THEN 'never checked'
            WHEN h.checked_at <= clock() - interval '5 minutes' THEN 'stale'
            ELSE h.status END AS status,
       h.status AS last_status,
       h.detail,
       h.reported_by,
       h.checked_at,
       h.status = 'DOWN' AND h.checked_at > clock() - interval '5 minutes' AS holding_claims,
       (SELECT count(*) FROM movement_request_nodes n
         WHERE n.node_state = 'READY' AND n.quarantined_at IS NULL
           AND n.executor_key = e.executor_key) AS ready_nodes
  FROM executors e
  LEFT JOIN executor_health h ON h.executor_key = e.executor_key;
