-- depends: 0075_one_transfer_one_withdrawal
--
-- A claim adds the movement's amount to the day's usage of each scope with a
-- daily cap the node falls under, and a claim that ends before anything went
-- out gives it back (give_back_value). The give-back subtracted from the
-- scopes capped when it ran, not those the claim had counted: a cap added
-- in between (a lane's, say) was given back an amount it never got, and
-- another claim could then start more than the cap allowed that day. The
-- claim now records what it counted:
--   node_intents.value_counted  the scopes the claim's amount was added to,
--                               'scope:name' (lane:x, venue:bybit_withdraw,
--                               network:*); NULL once given back, and for
--                               intents made before this migration (their
--                               claims' usage stays counted for their day:
--                               never less than was started)

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE node_intents ADD COLUMN value_counted text[];
$ddl$);
