-- depends: 0036_balance_snapshot_retention
--
-- movement_request_nodes_completed_idx: the COMPLETED nodes by when they
-- finished, for lane_latency (the last day's completions per lane, read by
-- /metrics and `qtg status`), which read every node ever finished: 1.8 s a
-- read at a million finished nodes. One index entry per completed node, made
-- by the completion's own update (the row is written anew then anyway); the
-- FAILED nodes have theirs (movement_request_nodes_failed_idx).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE INDEX movement_request_nodes_completed_idx ON movement_request_nodes (finished_at)
    WHERE node_state = 'COMPLETED';
$ddl$);
