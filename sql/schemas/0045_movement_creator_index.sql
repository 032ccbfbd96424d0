-- depends: 0044_movement_states_index
--
-- The API's movement list by creator (GET /v1/movements?created_by=...)
-- walked the primary key from the newest movement back and kept the creator's
-- rows: a creator with few movements (a person's, a new upstream system's)
-- was found by reading the whole history behind them. The movements now have
-- an index by creator and id, so a page of one creator's movements, newest
-- first, is the first entries of the index under that creator. Each movement
-- is written into it once, at creation: created_by never changes.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE INDEX movement_requests_creator_idx ON movement_requests (created_by, id);
$ddl$);
