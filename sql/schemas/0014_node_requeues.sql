-- depends: 0010_heartbeat_interval
--
-- node_requeues   the two-operator way to give a node a fresh side effect.
--                 Once a node's intent is PREPARED (its signed transaction or
--                 exchange request is recorded), no runner call may hand the
--                 node a new payload: it is resubmitted with that payload or
--                 concluded from evidence. When operators judge from the
--                 evidence that the prepared side effect can never land, one
--                 asks for a requeue (requeue_node) and a second login
--                 confirms it (requeue_node again); only then does the node
--                 go back to READY and its prepared intent become ABANDONED.
--   intent_id      the PREPARED intent the request was made against: a
--                  confirmation applies only while it is still the node's
--                  latest intent and the node is still UNKNOWN
--   evidence       what the requester saw: the node's evidence, last error
--                  and the prepared intent, kept with the request
--   state          REQUESTED -> APPLIED, or STALE when the node moved on
--                  before a second operator confirmed

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE node_requeues (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id      bigint NOT NULL REFERENCES movement_request_nodes ON DELETE CASCADE,
    request_id   bigint NOT NULL REFERENCES movement_requests ON DELETE CASCADE,
    intent_id    bigint NOT NULL REFERENCES node_intents ON DELETE CASCADE,
    evidence     jsonb NOT NULL,
    reason       text NOT NULL CHECK (btrim(reason) <> ''),
    state        text NOT NULL CHECK (state IN ('REQUESTED', 'APPLIED', 'STALE')),
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL,
    confirmed_by text,
    decided_at   timestamptz,
    CHECK ((state = 'APPLIED') = (confirmed_by IS NOT NULL)),
    CHECK (confirmed_by IS DISTINCT FROM requested_by)
);
-- at most one open request per node
CREATE UNIQUE INDEX node_requeues_open_idx ON node_requeues (node_id) WHERE state = 'REQUESTED';
$ddl$);
