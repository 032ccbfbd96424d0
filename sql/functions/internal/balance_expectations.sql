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
-- (balance_state, balance_change) and expected = B0 + the sum of
-- those ranges. An effect decided (certain, or void) before the read starts
-- counts the same for every later read: the account's anchor (balance_anchors,
-- moved by advance_balance_anchors) holds the sum of those decided before its
-- through_at. A read that starts at or after through_at is the anchor's sum
-- plus the effects not decided by then; one that starts before it (read long
-- ago, recorded late) is counted from the baseline. Only the candidates of the
-- earliest of those times can contribute (balance_candidates).
-- node_ids: the nodes not in the anchor whose effect on the account changed or
-- may change between the two windows; lanes and executors: theirs and the
-- anchor's (the breakers a drift alert trips). Internal; reads only.
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
               b0.id AS base_id, b0.balance AS base, b0.read_started_at AS s0, b0.recorded_at AS e0,
               a.through_at AS anchored_through, coalesce(a.low, 0) AS anchor_low, coalesce(a.high, 0) AS anchor_high,
               coalesce(a.lanes, '{}') AS anchor_lanes, coalesce(a.executors, '{}') AS anchor_executors
          FROM balance_snapshots s
          JOIN balance_baselines bl ON bl.account_kind = s.account_kind AND bl.account_key = s.account_key
                                   AND bl.address = s.address AND bl.asset = s.asset
          JOIN balance_snapshots b0 ON b0.id = bl.snapshot_id
          LEFT JOIN balance_anchors a ON a.account_kind = s.account_kind AND a.account_key = s.account_key
                                     AND a.address = s.address AND a.asset = s.asset
                                     AND a.baseline_snapshot_id = b0.id AND a.through_at <= s.read_started_at
         WHERE s.id = ANY (p_snapshot_ids) AND s.balance IS NOT NULL AND s.id >= b0.id
    ), horizon AS (
        SELECT min(coalesce(snaps.anchored_through, snaps.s0)) AS since FROM snaps
    ), effects AS (
        SELECT * FROM node_balance_effects(ARRAY(SELECT balance_candidates(horizon.since) FROM horizon))
    ), states AS (
        SELECT snaps.id AS snap_id, x.node_id, x.lane, x.executor_key, x.low, x.high, x.reversible,
               balance_state(x.certain_at, x.void_at, x.may_start_at, snaps.s0, snaps.e0) AS before,
               balance_state(x.certain_at, x.void_at, x.may_start_at, snaps.s1, snaps.e1) AS after
          FROM snaps
          JOIN effects x ON x.account_kind = snaps.account_kind AND x.account_key = snaps.account_key
                        AND x.address = snaps.address AND x.asset = snaps.asset
         -- the effects decided before the anchor's through_at are in its sums
         WHERE snaps.anchored_through IS NULL
            OR NOT balance_decided(x.certain_at, x.void_at, snaps.anchored_through)
    ), contributions AS (
        SELECT c.snap_id, c.node_id, c.lane, c.executor_key, c.change[1] AS lo, c.change[2] AS hi
          FROM (SELECT states.snap_id, states.node_id, states.lane, states.executor_key,
                       balance_change(states.before, states.after, states.low, states.high, states.reversible) AS change
                  FROM states) c
    )
    SELECT snaps.id, snaps.base_id, snaps.base,
           snaps.base + snaps.anchor_low + coalesce(sum(c.lo), 0),
           snaps.base + snaps.anchor_high + coalesce(sum(c.hi), 0),
           coalesce(array_agg(DISTINCT c.node_id) FILTER (WHERE c.node_id IS NOT NULL), '{}'),
           ARRAY(SELECT DISTINCT l FROM unnest(snaps.anchor_lanes || array_agg(c.lane) FILTER (WHERE c.node_id IS NOT NULL)) l
                  ORDER BY l),
           ARRAY(SELECT DISTINCT x FROM unnest(snaps.anchor_executors
                                               || array_agg(c.executor_key) FILTER (WHERE c.node_id IS NOT NULL)) x
                  ORDER BY x)
      FROM snaps
      LEFT JOIN contributions c ON c.snap_id = snaps.id
     GROUP BY snaps.id, snaps.base_id, snaps.base, snaps.anchor_low, snaps.anchor_high, snaps.anchor_lanes,
              snaps.anchor_executors;
$$;
