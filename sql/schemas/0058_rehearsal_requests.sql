-- depends: 0057_movement_rehearsals
--
-- rehearsal_requests: rehearsals asked for where none can be run (the
-- operator page, the HTTP API: neither has anvil nor the chains' RPC URLs),
-- served by an operator's rehearsal service (`qtg rehearse --requested`).
-- The database is the only queue: request_rehearsal writes a row (and
-- NOTIFYs qtg_<network>_rehearsals), claim_rehearsal_request hands the
-- oldest open one to a service, finish_rehearsal_request closes it with the
-- rehearsal the service recorded (record_rehearsal) or why none could be:
--   id            the request, in the order asked (the oldest is served first)
--   movement_id   the movement to rehearse (PENDING_APPROVAL when asked)
--   requested_by  the login that asked (session_user)
--   requested_at  the clock when it asked (set by request_rehearsal: a column
--                 default may not name qtg.clock(), which every migrate
--                 re-creates)
--   claimed_by    the login of the service serving it (NULL: waiting)
--   claimed_at    the clock when it was claimed; a claim older than 30 minutes
--                 is a service that died: the next claim takes it over
--   finished_at   the clock when it was finished (NULL: open)
--   rehearsal_id  the rehearsal it gave (movement_rehearsals), or
--   problem       why it gave none (at most 4,096 characters): exactly one of
--                 the two once finished, neither while open
-- At most one open request a movement (rehearsal_requests_open_idx): asking
-- again while one is open answers that one. Only the three functions write
-- it (as the owner); the reader role, and so every operator, SELECTs it like
-- every table (granted by the installer).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE rehearsal_requests (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    movement_id  bigint NOT NULL REFERENCES movement_requests ON DELETE CASCADE,
    requested_by text NOT NULL DEFAULT session_user,
    requested_at timestamptz NOT NULL,
    claimed_by   text,
    claimed_at   timestamptz,
    finished_at  timestamptz,
    rehearsal_id bigint REFERENCES movement_rehearsals,
    problem      text CHECK (btrim(problem) <> '' AND length(problem) <= 4096),
    CHECK ((claimed_by IS NULL) = (claimed_at IS NULL)),
    CHECK (CASE WHEN finished_at IS NULL THEN rehearsal_id IS NULL AND problem IS NULL
                ELSE num_nonnulls(rehearsal_id, problem) = 1 END)
);
-- one open request a movement (request_rehearsal's idempotence, under concurrency too)
CREATE UNIQUE INDEX rehearsal_requests_open_idx ON rehearsal_requests (movement_id)
    WHERE finished_at IS NULL;
-- the queue: the open requests, oldest first (claim_rehearsal_request)
CREATE INDEX rehearsal_requests_queue_idx ON rehearsal_requests (id) WHERE finished_at IS NULL;
-- a movement's latest request, by its key (the rehearsal_status view)
CREATE INDEX rehearsal_requests_movement_idx ON rehearsal_requests (movement_id, id);
$ddl$);
