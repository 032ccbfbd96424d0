-- balance_expectations: for each of p_snapshot_ids (successful reads of
-- accounts that have a baseline, read after it), the range the engine's own
-- records expect the balance in, and the side-effect nodes that make it.
--
-- A read is the window [read_started_at, recorded_at] (the database clock
-- before the runner read, and when it recorded). Against a window, a node's
-- effect on an account (node_balance_effects: [low, high], may_start_at,
-- certain_at, void_at) is
--   C  certainly landed       certain_at before the window starts
--   N  certainly not (yet)    void_at before the window starts, or it cannot have
--                             started before the window ended
--   U  uncertain              otherwise: it may or may not be in the balance
-- The expected change since the baseline B0 is, per node, the change between
-- its state at the baseline's window and at this one, with the same effect e in
-- [low, high] both times:
--   C->C, N->N       0
--   N->C             e
--   N->U, U->C, U->U 0 or e          (U->U: or -e when reversible)
--   U->N             0               (or -e when reversible: landed, then undone)
--   anything else    -e, 0 or e      (cannot happen while records only move on)
-- and expected = B0 + the sum of those ranges. Only nodes not finished before
-- the earliest baseline window starts can contribute (movement_request_nodes_
-- balance_idx), plus transfers into a venue deposit address whose credit was
-- not certain by then (the partial index movement_request_nodes_transfer_to_idx).
-- node_ids, lanes and executors: the side-effect nodes with an effect on the
-- account that changed or may change between the two windows (the breakers a
-- drift alert trips). Internal; reads only.
CREATE OR REPLACE FUNCTION balance_expectations(p_snapshot_ids bigint[])
RETURNS TABLE (
    snapshot_id          bigint,
    baseline_snapshot_id bigint,
    baseline             numeric,
    expected_low         numeric,
    expected_high        numeric,
    node_ids             bigint[],
    lanes                text[],
    executors            text[]
)
LANGUAGE sql STABLE
AS $$
    WITH snaps AS (
        SELECT s.id, s.account_kind, s.account_key, s.address, s.asset,
               s.read_started_at AS s1, s.recorded_at AS e1,
               b0.id AS base_id, b0.balance AS base, b0.read_started_at AS s0, b0.recorded_at AS e0
          FROM balance_snapshots s
          JOIN balance_baselines bl ON bl.account_kind = s.account_kind AND bl.account_key = s.account_key
                                   AND bl.address = s.address AND bl.asset = s.asset
          JOIN balance_snapshots b0 ON b0.id = bl.snapshot_id
         WHERE s.id = ANY (p_snapshot_ids) AND s.balance IS NOT NULL AND s.id >= b0.id
    ), horizon AS (
        SELECT min(snaps.s0) AS since FROM snaps
    ), candidates AS (
        SELECT n.id
          FROM movement_request_nodes n, horizon
         WHERE n.has_side_effect AND (n.finished_at IS NULL OR n.finished_at >= horizon.since)
        UNION
        SELECT n.id
          FROM venue_deposit_addresses d
          JOIN movement_request_nodes n ON n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED'
                                       AND n.node_config ->> 'chain' = d.chain_key
                                       AND lower(n.node_config ->> 'to') = d.address
          CROSS JOIN horizon
         WHERE NOT EXISTS (SELECT 1 FROM capital_transfer_followups f
                            WHERE f.node_id = n.id AND f.followup_state IN ('CREDITED', 'MISMATCH')
                              AND f.resolved_at < horizon.since)
           AND NOT EXISTS (SELECT 1 FROM movement_plan_edges e
                             JOIN movement_request_nodes k ON k.id = e.child_node_id
                            WHERE e.parent_node_id = n.id AND k.executor_key = 'bybit_deposit'
                              AND k.node_state = 'COMPLETED' AND k.finished_at < horizon.since)
    ), effects AS (
        SELECT * FROM node_balance_effects(ARRAY(SELECT candidates.id FROM candidates))
    ), states AS (
        SELECT snaps.id AS snap_id, x.node_id, x.lane, x.executor_key, x.low, x.high, x.reversible,
               CASE WHEN x.certain_at < snaps.s0 THEN 'C'
                    WHEN x.void_at < snaps.s0 THEN 'N'
                    WHEN x.may_start_at <= snaps.e0 THEN 'U'
                    ELSE 'N' END AS before,
               CASE WHEN x.certain_at < snaps.s1 THEN 'C'
                    WHEN x.void_at < snaps.s1 THEN 'N'
                    WHEN x.may_start_at <= snaps.e1 THEN 'U'
                    ELSE 'N' END AS after
          FROM snaps
          JOIN effects x ON x.account_kind = snaps.account_kind AND x.account_key = snaps.account_key
                        AND x.address = snaps.address AND x.asset = snaps.asset
    ), contributions AS (
        SELECT states.snap_id, states.node_id, states.lane, states.executor_key,
               CASE WHEN states.before = states.after THEN
                        CASE WHEN states.before = 'U' THEN
                                 CASE WHEN states.reversible THEN least(0, states.low, -states.high)
                                      ELSE least(0, states.low) END
                             ELSE 0 END
                    WHEN states.before = 'N' AND states.after = 'C' THEN states.low
                    WHEN (states.before, states.after) IN (('N', 'U'), ('U', 'C')) THEN least(0, states.low)
                    WHEN states.before = 'U' AND states.after = 'N' THEN
                        CASE WHEN states.reversible THEN least(0, -states.high) ELSE 0 END
                    ELSE least(0, states.low, -states.high) END AS lo,
               CASE WHEN states.before = states.after THEN
                        CASE WHEN states.before = 'U' THEN
                                 CASE WHEN states.reversible THEN greatest(0, states.high, -states.low)
                                      ELSE greatest(0, states.high) END
                             ELSE 0 END
                    WHEN states.before = 'N' AND states.after = 'C' THEN states.high
                    WHEN (states.before, states.after) IN (('N', 'U'), ('U', 'C')) THEN greatest(0, states.high)
                    WHEN states.before = 'U' AND states.after = 'N' THEN
                        CASE WHEN states.reversible THEN greatest(0, -states.low) ELSE 0 END
                    ELSE greatest(0, states.high, -states.low) END AS hi
          FROM states
    )
    SELECT snaps.id, snaps.base_id, snaps.base,
           snaps.base + coalesce(sum(c.lo), 0),
           snaps.base + coalesce(sum(c.hi), 0),
           coalesce(array_agg(DISTINCT c.node_id) FILTER (WHERE c.node_id IS NOT NULL), '{}'),
           coalesce(array_agg(DISTINCT c.lane) FILTER (WHERE c.node_id IS NOT NULL), '{}'),
           coalesce(array_agg(DISTINCT c.executor_key) FILTER (WHERE c.node_id IS NOT NULL), '{}')
      FROM snaps
      LEFT JOIN contributions c ON c.snap_id = snaps.id
     GROUP BY snaps.id, snaps.base_id, snaps.base;
$$;
