-- depends: 0063_nodes_hot_room
--
-- A THROTTLED report (0061_observe_holds) adds the time a node was held back
-- to its observe_held_seconds, which its lane's fatal wait does not count.
-- Nothing bounded that sum: a runner login that reported THROTTLED at every
-- turn, broken or compromised, kept a node SUBMITTED or OBSERVING for ever,
-- out of recovery's reach, and no view called it stuck. engine_limits gains
-- the bound complete_observe_batch keeps:
--   max_observe_held_seconds  the time of one observation window a node may be
--                             held back (6 hours: far past any provider's
--                             block, within a day's quota); past it the
--                             window's time counts toward the fatal wait
--                             again, and a node held back once more past
--                             that wait goes UNKNOWN for recovery, audited
--                             with the outcome THROTTLED

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE engine_limits
    ADD COLUMN max_observe_held_seconds numeric NOT NULL DEFAULT 21600
        CHECK (max_observe_held_seconds > 0 AND max_observe_held_seconds <= 1e9);
$ddl$);
