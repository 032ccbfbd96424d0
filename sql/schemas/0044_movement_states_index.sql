-- depends: 0043_deposit_credit_candidates
--
-- The API's movement list by state (GET /v1/movements?state=...) walked the
-- primary key from the newest movement back and kept the rows in the state:
-- a state few movements are in (the approval queue, a movement executing for
-- long, the failed, cancelled and expired ones) was found by reading the
-- whole history. The movements not COMPLETED now have an index by state and
-- id. A movement is in it while it is open and stays in it if it fails, is
-- cancelled or expires; the update that completes it writes no entry here
-- (vacuum removes its earlier ones), so the index holds the open movements
-- and the rare outcomes, not the history. A list of COMPLETED movements
-- walks the primary key as before, where nearly every row is one.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE INDEX movement_requests_state_idx ON movement_requests (request_state, id)
    WHERE request_state <> 'COMPLETED';
$ddl$);
