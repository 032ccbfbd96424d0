-- depends: 0060_pauses
--
-- An observation the runner's request budget held back (the endpoint had no
-- turn for it, or answered 429: complete_observe's THROTTLED outcome) is not
-- an observation: the node was not looked at, so the wait is the provider's,
-- not the node's. Two columns of movement_request_nodes keep it apart:
--   observe_held_seconds  the seconds of the node's current observation window
--                         (since observe_started_at) it spent held back: from
--                         the poll that was due to the next turn, summed over
--                         its holds. Its pacing counts the window's time less
--                         these, so that a throttled provider never takes a
--                         node to its lane's fatal wait (and UNKNOWN); 0 when
--                         a window opens (a submit, a recovery)
--   observe_held_reason   why the node's last poll was held back (the
--                         budget's or the provider's words), NULL once a poll
--                         is made; shown by in_flight_nodes
-- A node held back writes no audit row and no latency sample: nothing of it
-- was learned, and its latency is the budget's.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes
    ADD COLUMN observe_held_seconds numeric NOT NULL DEFAULT 0
        CHECK (observe_held_seconds >= 0 AND observe_held_seconds < 'Infinity'),
    ADD COLUMN observe_held_reason text;
$ddl$);
