-- roll_up_pipeline_counts: moves pipeline_counts' finished rows into
-- pipeline_rollup_totals, so the view reads only what is recent or still open
-- (0039_pipeline_rollups). The pipeline_rollup sidecar calls it every minute,
-- and again while an entity is behind. Per entity (movements, nodes):
--   the fence    once none of the transactions that ran when the fence was
--                drawn still runs (fence_xacts), every id up to fence_id is
--                committed or gone for good;
--   counting     then the ids from below_id on, at most p_max of them and not
--                past fence_id, are read by key with the open_ids: the finished
--                rows are added to their state's total, the others become the
--                new open_ids, and below_id moves past the range read. A
--                finished row never changes state again, so a total stays true;
--   a new fence  is drawn when below_id has passed the fence (and at the first
--                call): the identity sequence's position, read before the
--                running transactions of this database
--                (running_transactions), so a row with an id at or under it
--                was inserted by one of those or by a transaction that had
--                already ended.
-- A transaction that runs for long holds the fence, and the view counts the
-- rows made since it was drawn until it ends. Needs READ COMMITTED (QT002
-- otherwise: a snapshot taken before the check could miss the rows of a
-- transaction the check found ended); QT002 for p_max outside 1 to 1,000,000.
-- Locks both rollup rows, in entity order: calls run one after the other.
-- Returns one row per entity: its below_id, how many ids under it are open,
-- whether this call counted, and how many ids it may count at once up to its
-- fence (behind: p_max was reached, or no transaction ran when the fence was
-- drawn; the caller calls again).
CREATE OR REPLACE FUNCTION roll_up_pipeline_counts(p_max integer DEFAULT 100000)
RETURNS TABLE (entity text, below_id bigint, open_rows integer, rolled boolean, behind bigint)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now       timestamptz := clock();
    v_ready     text[];
    v_movements bigint;
    v_nodes     bigint;
    v_running   text[];
BEGIN
    PERFORM check_read_committed('roll_up_pipeline_counts');
    PERFORM check_args('roll_up_pipeline_counts', p_max => p_max, p_max_limit => 1000000);
    PERFORM 1 FROM pipeline_rollups r ORDER BY r.entity FOR UPDATE;

    v_running := running_transactions();
    SELECT coalesce(array_agg(r.entity), '{}') INTO v_ready
      FROM pipeline_rollups r
     WHERE r.fence_id IS NOT NULL
       AND NOT r.fence_xacts && v_running;

    -- a statement of its own: its snapshot is taken after the fence's transactions ended
    WITH bounds AS (
        SELECT r.entity, r.open_ids, r.below_id, least(r.fence_id, r.below_id + p_max - 1) AS upto
          FROM pipeline_rollups r
         WHERE r.entity = ANY (v_ready)
    ), seen AS (
        -- each entity's rows still open below its mark, and its next range
        -- (apart: the open ones are all below below_id)
        SELECT 'movement' AS entity, m.id, m.request_state::text AS state, m.finished_at IS NOT NULL AS finished
          FROM bounds b
          JOIN movement_requests m ON m.id = ANY (b.open_ids) OR m.id BETWEEN b.below_id AND b.upto
         WHERE b.entity = 'movement'
        UNION ALL
        SELECT 'node', n.id, n.node_state::text, n.finished_at IS NOT NULL
          FROM bounds b
          JOIN movement_request_nodes n ON n.id = ANY (b.open_ids) OR n.id BETWEEN b.below_id AND b.upto
         WHERE b.entity = 'node'
    ), counted AS (
        INSERT INTO pipeline_rollup_totals AS t (entity, state, total)
        SELECT s.entity, s.state, count(*) FROM seen s WHERE s.finished GROUP BY s.entity, s.state
        ON CONFLICT (entity, state) DO UPDATE SET total = t.total + excluded.total
    )
    UPDATE pipeline_rollups r
       SET open_ids = coalesce((SELECT array_agg(s.id ORDER BY s.id) FROM seen s
                                 WHERE s.entity = r.entity AND NOT s.finished), '{}'),
           below_id = b.upto + 1,
           fence_xacts = '{}'  -- seen ended: the fence holds until below_id passes it
      FROM bounds b
     WHERE b.entity = r.entity;

    -- the new fences: the sequences first, then who runs
    IF EXISTS (SELECT 1 FROM pipeline_rollups r WHERE r.fence_id IS NULL OR r.below_id > r.fence_id) THEN
        v_movements := coalesce(pg_sequence_last_value(pg_get_serial_sequence('movement_requests', 'id')::regclass), 0);
        v_nodes := coalesce(pg_sequence_last_value(pg_get_serial_sequence('movement_request_nodes', 'id')::regclass), 0);
        -- this transaction's own rows are visible to it, and its counts end with them
        v_running := running_transactions();
        UPDATE pipeline_rollups r
           SET fence_id = greatest(CASE r.entity WHEN 'movement' THEN v_movements ELSE v_nodes END, r.below_id - 1),
               fence_xacts = v_running
         WHERE r.fence_id IS NULL OR r.below_id > r.fence_id;
    END IF;
    UPDATE pipeline_rollups r SET rolled_at = v_now WHERE r.entity = ANY (v_ready);

    RETURN QUERY
    SELECT r.entity, r.below_id, cardinality(r.open_ids), r.entity = ANY (v_ready),
           CASE WHEN r.fence_xacts = '{}' THEN greatest(r.fence_id - r.below_id + 1, 0) ELSE 0 END
      FROM pipeline_rollups r
     ORDER BY r.entity;
END
$$;
