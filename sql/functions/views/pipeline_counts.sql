-- pipeline_counts: how many movements and nodes are in each state.
-- The finished rows under each entity's below_id come from
-- pipeline_rollup_totals (roll_up_pipeline_counts keeps them); the rows from
-- below_id to the newest and the open ones under it (open_ids) are counted as
-- they are now, each read by its key. So a read costs what was made since the
-- last roll-up and what is still open, not the history (0039 rolled up the
-- history there was when it was applied). The ids from below_id to the newest
-- are a series probed one by one: planned as the walk it is whatever the
-- table's size (a range from below_id, unknown when planning, is estimated at
-- a third of the table, which a large table would read whole).
CREATE OR REPLACE VIEW pipeline_counts AS
SELECT c.entity, c.state, sum(c.total)::bigint AS total
  FROM (SELECT t.entity, t.state, t.total
          FROM pipeline_rollup_totals t
        UNION ALL
        SELECT 'movement', m.request_state::text, count(*)
          FROM pipeline_rollups r
         CROSS JOIN LATERAL generate_series(r.below_id, (SELECT max(x.id) FROM movement_requests x)) AS g (id)
          JOIN movement_requests m ON m.id = g.id
         WHERE r.entity = 'movement'
         GROUP BY m.request_state
        UNION ALL
        SELECT 'movement', m.request_state::text, count(*)
          FROM pipeline_rollups r JOIN movement_requests m ON m.id = ANY (r.open_ids)
         WHERE r.entity = 'movement'
         GROUP BY m.request_state
        UNION ALL
        SELECT 'node', n.node_state::text, count(*)
          FROM pipeline_rollups r
         CROSS JOIN LATERAL generate_series(r.below_id, (SELECT max(x.id) FROM movement_request_nodes x)) AS g (id)
          JOIN movement_request_nodes n ON n.id = g.id
         WHERE r.entity = 'node'
         GROUP BY n.node_state
        UNION ALL
        SELECT 'node', n.node_state::text, count(*)
          FROM pipeline_rollups r JOIN movement_request_nodes n ON n.id = ANY (r.open_ids)
         WHERE r.entity = 'node'
         GROUP BY n.node_state) c
 GROUP BY c.entity, c.state;
