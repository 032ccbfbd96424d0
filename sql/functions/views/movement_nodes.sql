-- movement_nodes: every node of every movement, for `qtg movement show` and
-- dashboards: state, executor, lane, pacing, references and last error, and
-- route: where the node's money goes, as its config names it (the chains,
-- the venue, from, to, the token, the mode), so that the approver reads on
-- one line a step's route, not only its key. NULL for a node that names none
-- (the sim's).
CREATE OR REPLACE VIEW movement_nodes AS
SELECT node.request_id AS movement_id,
       node.id AS node_id,
       node.node_key,
       node.executor_key,
       node.lane,
       node.node_state,
       node.pending_parents,
       node.has_side_effect,
       node.submit_attempts,
       node.recovery_attempts,
       node.observe_phase,
       node.observe_count,
       node.next_observe_at,
       node.external_ref,
       node.claimed_by,
       node.last_error,
       node.submitted_at,
       node.finished_at,
       node.finished_at - node.submitted_at AS flight_time,
       ARRAY(SELECT parent.node_key
               FROM movement_plan_edges edge
               JOIN movement_request_nodes parent ON parent.id = edge.parent_node_id
              WHERE edge.child_node_id = node.id
              ORDER BY parent.node_key) AS depends_on,
       (SELECT string_agg(k.key || ' ' || (node.node_config ->> k.key), ', ' ORDER BY k.ord)
          FROM unnest(ARRAY['venue', 'coin', 'source_chain', 'source', 'chain', 'destination_chain',
                            'destination', 'token', 'from', 'to', 'mode', 'finality'])
               WITH ORDINALITY AS k(key, ord)
         WHERE node.node_config ? k.key) AS route
  FROM movement_request_nodes node;
