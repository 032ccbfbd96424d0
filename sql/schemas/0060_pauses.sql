-- depends: 0059_endpoint_leases
--
-- Pauses: a breaker is the one way a scope stops taking new claims, whether
-- an operator paused it (trip_breaker) or the engine tripped it (repeated
-- failures, a drift alert). Its scopes grow from a lane and a venue (an
-- executor) to:
--   movement  one movement (name: its id)
--   lane      a lane (name: the lane)
--   venue     an executor with a side effect (name: its key)
--   chain     the nodes whose config names the chain (name: its chain_key)
--   network   every node of the network (name: '*')
-- A pause may end by itself:
--   expires_at   NULL: until it is resumed; else the time it stops holding
--                (a later trip of the scope replaces the expired row)
--   by_operator  true when an operator paused it: its pauser may not resume
--                it (four eyes: another operator resumes it at once); a
--                breaker the engine tripped takes two operators to reset,
--                as before
-- What is in flight is never held: a pause holds READY nodes only.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE breakers DROP CONSTRAINT breakers_scope_check;
ALTER TABLE breakers ADD CONSTRAINT breakers_scope_check
    CHECK (scope IN ('movement', 'lane', 'venue', 'chain', 'network'));
ALTER TABLE breakers ADD COLUMN expires_at timestamptz CHECK (isfinite(expires_at));
ALTER TABLE breakers ADD COLUMN by_operator boolean NOT NULL DEFAULT false;
$ddl$);
