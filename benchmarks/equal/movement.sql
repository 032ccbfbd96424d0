-- What an equal-guarantee peer writes for one one-step movement, in its own
-- database beside the queue's tables: the same record the engine keeps.
--
--   record_intent  one transaction: the movement APPROVED -> EXECUTING and the
--                  intent PREPARED, an audit row for each transition and a
--                  callback outbox row for the movement's state change,
--                  committed BEFORE the side effect
--   submit         the side effect: one row in the simulated outside world
--                  (idempotent per movement, as the sim executor's lane)
--   report         one transaction: the intent SUBMITTED and the movement
--                  EXECUTING -> COMPLETED, an audit row each, a callback row
--
-- Each statement takes the movement id as $1 and is one round trip. A
-- redelivered job finds its rows already moved and writes nothing twice.
-- Python (psycopg, asyncpg, SQLAlchemy) and Node (pg) read this file by the
-- `-- name:` markers.

-- name: schema
CREATE SCHEMA eg;
CREATE SCHEMA eg_world;
CREATE TABLE eg.movements (
    id         bigint PRIMARY KEY,
    state      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE eg.intents (
    movement_id bigint PRIMARY KEY REFERENCES eg.movements (id),
    state       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE eg.audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    movement_id bigint NOT NULL,
    entity      text NOT NULL,
    from_state  text,
    to_state    text NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX eg_audit_movement_idx ON eg.audit (movement_id);
CREATE TABLE eg.callbacks (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    movement_id  bigint NOT NULL,
    state        text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered_at timestamptz
);
CREATE INDEX eg_callbacks_pending_idx ON eg.callbacks (id) WHERE delivered_at IS NULL;
CREATE TABLE eg_world.side_effects (
    movement_id  bigint PRIMARY KEY,
    submit_count integer NOT NULL DEFAULT 1,
    submitted_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: record_intent
WITH m AS (
    UPDATE eg.movements SET state = 'EXECUTING', updated_at = now()
     WHERE id = $1 AND state = 'APPROVED'
    RETURNING id
), i AS (
    INSERT INTO eg.intents (movement_id, state) SELECT id, 'PREPARED' FROM m
    RETURNING movement_id
), c AS (
    INSERT INTO eg.callbacks (movement_id, state) SELECT id, 'EXECUTING' FROM m
)
INSERT INTO eg.audit (movement_id, entity, from_state, to_state)
SELECT id, 'movement', 'APPROVED', 'EXECUTING' FROM m
UNION ALL
SELECT movement_id, 'intent', NULL, 'PREPARED' FROM i

-- name: submit
INSERT INTO eg_world.side_effects (movement_id) VALUES ($1)
ON CONFLICT (movement_id)
DO UPDATE SET submit_count = eg_world.side_effects.submit_count + 1

-- name: report
WITH i AS (
    UPDATE eg.intents SET state = 'SUBMITTED', updated_at = now()
     WHERE movement_id = $1 AND state = 'PREPARED'
    RETURNING movement_id
), m AS (
    UPDATE eg.movements SET state = 'COMPLETED', updated_at = now()
     WHERE id IN (SELECT movement_id FROM i) AND state = 'EXECUTING'
    RETURNING id
), c AS (
    INSERT INTO eg.callbacks (movement_id, state) SELECT id, 'COMPLETED' FROM m
)
INSERT INTO eg.audit (movement_id, entity, from_state, to_state)
SELECT movement_id, 'intent', 'PREPARED', 'SUBMITTED' FROM i
UNION ALL
SELECT id, 'movement', 'EXECUTING', 'COMPLETED' FROM m
