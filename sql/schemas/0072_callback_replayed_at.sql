-- depends: 0071_one_withdrawal_one_node
--
-- A callback older than callback_settings.max_age_seconds (3 days by
-- default) goes DEAD at its next claim, unsent. A replay reset its attempts
-- but not its age: a callback replayed after a receiver was down for a long
-- weekend went DEAD again at once, with no POST. Its age now counts from its
-- last replay:
--   callback_outbox.replayed_at  when an operator last replayed it
--                                (replay_callback); NULL before any

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE callback_outbox ADD COLUMN replayed_at timestamptz;
$ddl$);
