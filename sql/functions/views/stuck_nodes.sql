-- stuck_nodes: nodes an operator should look at, with the reason:
--   quarantined                set aside until an operator releases it (the
--                              reason is in quarantined_nodes)
--   UNKNOWN                    outcome in doubt, waiting for recovery
--   SUBMITTING past its lease  the dispatcher died or hung mid-submit
--   CCIP execution FAILED      the destination's OffRamp ran the message and
--                              it failed: waiting for a manual execution (the
--                              stranded reaper's on a v1.6 lane; an operator's
--                              on a v1.5 lane, which the reaper does not
--                              execute)
--   observing over baseline    slower than its lane's baseline (or fatal)
--   executor DOWN              READY, held back while its executor's latest
--                              health report (within 5 minutes) says DOWN
--   READY for over 5 minutes   no dispatcher is taking work
CREATE OR REPLACE VIEW stuck_nodes AS
SELECT node.node_id, node.movement_id, node.external_id, node.node_key, node.executor_key, node.lane,
       node.node_state,
       node.observe_phase,
       CASE
           WHEN node.quarantined_at IS NOT NULL THEN 'quarantined: see quarantined_nodes'
           WHEN node.node_state = 'UNKNOWN' THEN 'outcome unknown: waiting for recovery'
           WHEN node.node_state = 'SUBMITTING' THEN 'dispatcher lease expired mid-submit'
           WHEN node.executor_key = 'ccip' AND node.node_state = 'OBSERVING'
                AND node.evidence ->> 'ccip_state' = 'FAILURE' THEN
               CASE WHEN (SELECT lane.version FROM ccip_lanes lane
                           WHERE lane.source_chain_key = node.evidence ->> 'source_chain'
                             AND lane.dest_chain_key = node.evidence ->> 'dest_chain') = '1.6'
                    THEN 'CCIP execution FAILED on the destination: waiting for the stranded reaper''s manual execution'
                    ELSE 'CCIP execution FAILED on the destination: not a v1.6 lane, the stranded reaper does not '
                         'execute it; execute it by hand on the lane''s OffRamp (manuallyExecute), then the '
                         'observer completes the node'
               END
           WHEN node.node_state IN ('SUBMITTED', 'OBSERVING') THEN 'observing past the lane baseline'
           WHEN health.executor_key IS NOT NULL THEN
               format('executor %s is DOWN since %s: %s', health.executor_key, health.checked_at,
                      left(health.detail::text, 300))
           ELSE 'ready but not dispatched'
       END AS reason,
       node.updated_at AS since,
       clock() - node.updated_at AS stuck_for,
       node.last_error,
       node.claimed_by
  FROM all_nodes node
  LEFT JOIN executor_health health
         ON health.executor_key = node.executor_key AND health.status = 'DOWN'
        AND health.checked_at > clock() - interval '5 minutes' AND node.node_state = 'READY'
 WHERE -- only nodes not finished, as the partial indexes hold them (READY,
       -- observable, recoverable, quarantined): the view reads the open nodes,
       -- not every node (a PENDING node is never stuck: it waits on a parent)
       ((node.node_state = 'READY' AND node.quarantined_at IS NULL)
     OR (node.node_state IN ('SUBMITTED', 'OBSERVING') AND node.quarantined_at IS NULL)
     OR (node.node_state IN ('UNKNOWN', 'SUBMITTING') AND node.quarantined_at IS NULL)
     OR (node.quarantined_at IS NOT NULL AND node.finished_at IS NULL))
   AND (node.node_state = 'UNKNOWN'
    OR health.executor_key IS NOT NULL
    OR (node.quarantined_at IS NOT NULL AND node.finished_at IS NULL)
    OR (node.node_state = 'SUBMITTING' AND node.lease_until <= clock())
    OR (node.node_state IN ('SUBMITTED', 'OBSERVING') AND node.observe_phase IN ('over_baseline', 'fatal'))
    OR (node.executor_key = 'ccip' AND node.node_state = 'OBSERVING' AND node.evidence ->> 'ccip_state' = 'FAILURE')
    OR (node.node_state = 'READY' AND node.updated_at <= clock() - interval '5 minutes'
        AND (node.not_before IS NULL OR node.not_before <= clock() - interval '5 minutes')));
